// Validates deploy/kubernetes offline: every object against the
// Kubernetes OpenAPI schemas (kubernetes-models), names far below the
// 63-character limit, one image for everything (the one built from this
// repository), and the admission policy's CEL (@marcbachmann/cel-js)
// against pods it must allow and pods it must deny. Negative controls show
// that the schema check and the CEL check can fail.
//
//   node validate.mjs DEPLOY_DIR NODE_MODULES_DIR
import fs from 'node:fs'
import path from 'node:path'
import {createRequire} from 'node:module'
import {pathToFileURL} from 'node:url'
import {kubernetesSchema} from './schema.mjs'
import {expect, finish} from './expect.mjs'

const [deployDir, modulesDir] = process.argv.slice(2)
const require = createRequire(path.join(modulesDir, 'package.json'))
const YAML = require('yaml')
const cel = await import(pathToFileURL(path.join(modulesDir, 'node_modules/@marcbachmann/cel-js/lib/index.js')).href)

// ---- the manifests ----------------------------------------------------------
const docs = []
const files = fs.readdirSync(deployDir).filter(f => f.endsWith('.yaml') && f !== 'kustomization.yaml').sort()
for (const file of files) {
  for (const doc of YAML.parseAllDocuments(fs.readFileSync(path.join(deployDir, file), 'utf8'))) {
    expect(doc.errors.length === 0, `${file}: parses as YAML ${doc.errors.join('; ')}`)
    const obj = doc.toJS()
    if (obj) docs.push({file, obj})
  }
}

// The models (kubernetes-models, ES modules imported from their files, once
// each before the checks) and the field check shared with gpuslice-dra's
// tests (schema.mjs).
const schema = kubernetesSchema(modulesDir)
const models = new Map()
for (const {obj} of docs) {
  const Model = await schema.model(obj)
  if (Model) models.set(`${obj.apiVersion}/${obj.kind}`, Model)
}

function schemaErrors (obj) {
  const Model = models.get(`${obj.apiVersion}/${obj.kind}`)
  if (!Model) return `no schema for ${obj.apiVersion} ${obj.kind}`
  return schema.schemaErrors(Model, obj)
}

// The schemas accept fields they do not define, where the API server (and
// kubectl's default strict field validation) refuses them: a typo such as
// hostPid would pass silently. So every field is also looked up in the
// models' type declarations, which list each object's fields.
const {unknownFields, modelFile} = schema

// Custom resources (the Prometheus operator's PodMonitor) have no schema
// here: their fields are checked by hand below.
const custom = obj => obj.apiVersion.startsWith('monitoring.coreos.com/')
for (const {file, obj} of docs.filter(d => !custom(d.obj))) {
  const err = schemaErrors(obj)
  expect(err === null, `${file}: ${obj.kind} ${obj.metadata.name} is valid ${obj.apiVersion} (${err || 'schema ok'})`)
  const unknown = unknownFields(obj, modelFile(obj), obj.kind, [], {freeForm: true, maps: true})
  expect(unknown.length === 0, `${file}: ${obj.kind} ${obj.metadata.name} has only fields the API defines ${unknown}`)
}

const kustomization = YAML.parse(fs.readFileSync(path.join(deployDir, 'kustomization.yaml'), 'utf8'))
// Applied on their own: the examples, the PodMonitor (a kind only the
// Prometheus operator defines) and the uninstall.
const separate = ['example-pods.yaml', 'example-claims.yaml', 'podmonitor.yaml', 'uninstall.yaml']
expect(kustomization.resources.every(r => fs.existsSync(path.join(deployDir, r))) &&
       files.filter(f => !separate.includes(f)).every(f => kustomization.resources.includes(f)) &&
       !separate.some(f => kustomization.resources.includes(f)),
       `kustomization.yaml lists every manifest but ${separate.join(', ')}, and only files that exist`)

// Names: DNS labels far below the 63-character limit (40 at most).
const dns = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/
function podSpecs (obj) {
  if (obj.kind === 'Pod') return [obj.spec]
  if (obj.spec && obj.spec.template) return [obj.spec.template.spec]
  return []
}
const names = []
for (const {obj} of docs) {
  names.push([obj.kind, obj.metadata.name])
  for (const spec of podSpecs(obj)) {
    for (const c of [...(spec.initContainers || []), ...spec.containers]) names.push(['container', c.name])
    for (const v of spec.volumes || []) names.push(['volume', v.name])
  }
}
// (a DeviceClass is named like its driver, a DNS subdomain)
const subdomain = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/
const long = names.filter(([kind, n]) => n.length > 40 || !(kind === 'DeviceClass' ? subdomain : dns).test(n))
expect(long.length === 0, `${names.length} object, container and volume names are DNS labels of at most 40 characters ` +
       `(longest: ${Math.max(...names.map(([, n]) => n.length))}) ${JSON.stringify(long)}`)
const labels = docs.flatMap(({obj}) => Object.entries((obj.metadata && obj.metadata.labels) || {}))
expect(labels.every(([, v]) => String(v).length <= 63), 'every label value has at most 63 characters')

// One image, the one built from this repository, for every container.
const images = new Set(docs.flatMap(({obj}) => podSpecs(obj).flatMap(s =>
  [...(s.initContainers || []), ...s.containers].map(c => c.image))))
expect(images.size === 1 && [...images][0].endsWith('/gpuslice:0.1.0'),
       `every container runs the gpuslice image and nothing else is pulled (${[...images]})`)

const ds = docs.find(d => d.obj.kind === 'DaemonSet' && d.obj.metadata.name === 'gpuslice-server').obj
const dsSpec = ds.spec.template.spec
const hostPaths = Object.fromEntries(dsSpec.volumes.filter(v => v.hostPath).map(v => [v.hostPath.path, v.name]))
expect(hostPaths['/run/gpuslice'] && hostPaths['/var/run/cdi'] && dsSpec.hostPID === true,
       'the DaemonSet mounts /run/gpuslice and /var/run/cdi from the host and sees host PIDs')
const server = dsSpec.containers.find(c => c.name === 'server')
expect(server.volumeMounts.some(m => m.mountPath === '/etc/gpuslice/tenants.d' &&
       dsSpec.volumes.find(v => v.name === m.name).configMap.name === 'gpuslice-tenants'),
       'tenants come from the gpuslice-tenants ConfigMap at /etc/gpuslice/tenants.d')
const tenantsCm = docs.find(d => d.obj.kind === 'ConfigMap' && d.obj.metadata.name === 'gpuslice-tenants').obj
expect(Object.keys(tenantsCm.data).length === 2 && Object.keys(tenantsCm.data).every(k => /^[a-z0-9][-a-z0-9]*\.conf$/.test(k)),
       `the example ConfigMap holds two tenant files (${Object.keys(tenantsCm.data)})`)

// ---- metrics, priority, images, uninstall (issue 29) ---------------------------
const podLabels = ds.spec.template.metadata.labels
const within = (sel, labels) => Object.entries(sel || {}).every(([k, v]) => labels[k] === v) &&
  Object.keys(sel || {}).length > 0
const metricsPort = (server.ports || []).find(p => p.name === 'metrics')
const args = server.command.concat(server.args || [])
const podIp = (server.env || []).find(e => e.name === 'POD_IP')
expect(metricsPort && args.includes(`--metrics=$(POD_IP):${metricsPort.containerPort}`) && podIp &&
       podIp.valueFrom.fieldRef.fieldPath === 'status.podIP',
       'the server serves /metrics on the pod\'s address, on its container port "metrics"')
const nodeName = (server.env || []).find(e => e.name === 'NODE_NAME')
expect(args.includes('--hostname=$(NODE_NAME)') && nodeName && nodeName.valueFrom.fieldRef.fieldPath === 'spec.nodeName',
       'series are labelled Hostname with the node\'s name, as dcgm-exporter\'s are')
const podLogs = server.volumeMounts.find(m => m.mountPath === '/var/log/containers')
expect(args.includes('--pod-log-dir=/var/log/containers') && podLogs && podLogs.readOnly === true &&
       dsSpec.volumes.find(v => v.name === podLogs.name).hostPath.path === '/var/log/containers',
       'the kubelet\'s log links are mounted read-only for the namespace, pod and container labels')
const ann = ds.spec.template.metadata.annotations || {}
expect(ann['prometheus.io/scrape'] === 'true' && Number(ann['prometheus.io/port']) === metricsPort.containerPort &&
       ann['prometheus.io/path'] === '/metrics', 'the pods carry prometheus.io/scrape, port and path annotations')
expect(dsSpec.priorityClassName === 'system-node-critical', 'the server runs at priority system-node-critical')
const svc = docs.find(d => d.obj.kind === 'Service').obj
expect(svc.metadata.namespace === ds.metadata.namespace && within(svc.spec.selector, podLabels) &&
       svc.spec.ports.some(p => p.name === 'metrics' && p.targetPort === 'metrics'),
       'a Service selects the server pods and targets their "metrics" port')
const pm = docs.find(d => d.obj.kind === 'PodMonitor')
const pmErrors = []
if (!pm) {
  pmErrors.push('no PodMonitor')
} else {
  const o = pm.obj
  const known = {top: ['apiVersion', 'kind', 'metadata', 'spec'],
    spec: ['jobLabel', 'podTargetLabels', 'podMetricsEndpoints', 'selector', 'namespaceSelector', 'sampleLimit',
      'targetLimit', 'labelLimit', 'attachMetadata'],
    endpoint: ['port', 'targetPort', 'path', 'scheme', 'params', 'interval', 'scrapeTimeout', 'honorLabels',
      'honorTimestamps', 'relabelings', 'metricRelabelings', 'tlsConfig', 'bearerTokenSecret', 'basicAuth',
      'followRedirects', 'enableHttp2', 'filterRunning', 'proxyUrl']}
  const extra = (obj, list, where) => Object.keys(obj).filter(k => !list.includes(k)).map(k => `${where}.${k}`)
  pmErrors.push(...extra(o, known.top, 'PodMonitor'), ...extra(o.spec, known.spec, 'spec'))
  for (const e of o.spec.podMetricsEndpoints || []) pmErrors.push(...extra(e, known.endpoint, 'endpoint'))
  if (o.apiVersion !== 'monitoring.coreos.com/v1') pmErrors.push('apiVersion ' + o.apiVersion)
  if (!within(o.spec.selector.matchLabels, podLabels)) pmErrors.push('selector does not select the server pods')
  if (!(o.spec.namespaceSelector.matchNames || []).includes(ds.metadata.namespace)) pmErrors.push('namespaceSelector')
  if (!(o.spec.podMetricsEndpoints || []).length ||
      !o.spec.podMetricsEndpoints.every(e => e.port === 'metrics' && e.path === '/metrics')) pmErrors.push('endpoints')
}
expect(pmErrors.length === 0, `a PodMonitor (monitoring.coreos.com/v1, its known fields only) scrapes the server pods' ` +
       `"metrics" port ${pmErrors}`)
const image = server.image
const entry = (kustomization.images || []).find(i => image.startsWith(i.name + ':'))
expect(entry && `${entry.newName || entry.name}:${entry.newTag}` === image,
       `kustomization.yaml has an images: entry for ${image}, so kubectl's own kustomize can set it`)
const un = docs.find(d => d.obj.kind === 'DaemonSet' && d.obj.metadata.name === 'gpuslice-uninstall')
const unErrors = []
if (!un) {
  unErrors.push('no gpuslice-uninstall DaemonSet')
} else {
  const spec = un.obj.spec.template.spec
  const c = spec.initContainers[0]
  const hostOf = m => spec.volumes.find(v => v.name === m.name).hostPath.path
  const mounts = Object.fromEntries(c.volumeMounts.map(m => [m.mountPath, hostOf(m)]))
  const flag = name => (c.command.find(a => a.startsWith(`--${name}=`)) || '').split('=')[1]
  if (!c.command.includes('--uninstall')) unErrors.push('no --uninstall')
  for (const [name, host] of [['run-dir', '/run/gpuslice'], ['cdi-dir', '/var/run/cdi'], ['install-dir', '/opt/gpuslice']]) {
    if (mounts[flag(name)] !== host) unErrors.push(`--${name} is not the host's ${host}`)
  }
  if (JSON.stringify(spec.nodeSelector) !== JSON.stringify(dsSpec.nodeSelector)) unErrors.push('another nodeSelector')
  if (!spec.affinity || JSON.stringify(spec.affinity) !== JSON.stringify(dsSpec.affinity)) unErrors.push('another node affinity')
  if (spec.hostPID !== true) unErrors.push('no hostPID (a server still running is stopped by its host PID)')
}
expect(unErrors.length === 0, `uninstall.yaml runs gpuslice-server --uninstall on the server's nodes, on the host's ` +
       `run, CDI and install directories ${unErrors}`)

// Negative controls: the schema check rejects broken objects.
const broken = [
  ['a DaemonSet without its selector', o => { delete o.spec.selector }, ds],
  ['a container whose image is a number', o => { o.spec.template.spec.containers[0].image = 5 }, ds],
  ['a Pod container without a name', o => { delete o.spec.containers[0].name },
    docs.find(d => d.obj.kind === 'Pod').obj],
  ['a policy binding whose validationActions is not a list', o => { o.spec.validationActions = 'Deny' },
    docs.find(d => d.obj.kind === 'ValidatingAdmissionPolicyBinding').obj]
]
const typo = JSON.parse(JSON.stringify(ds))
typo.spec.template.spec.hostPid = true
typo.spec.template.spec.containers[0].securityContext.readonlyRootFilesystem = true
const typos = unknownFields(typo, modelFile(typo), 'DaemonSet', [])
expect(typos.length === 2, `negative control: misspelt fields are found (${typos})`)
for (const [what, mutate, obj] of broken) {
  const copy = JSON.parse(JSON.stringify(obj))
  mutate(copy)
  const err = schemaErrors(copy)
  expect(err !== null, `negative control: ${what} is rejected by the schema (${err})`)
}

// ---- the admission policy's CEL -----------------------------------------------
const policy = docs.find(d => d.obj.kind === 'ValidatingAdmissionPolicy').obj
const binding = docs.find(d => d.obj.kind === 'ValidatingAdmissionPolicyBinding').obj
expect(binding.spec.policyName === policy.metadata.name && binding.spec.validationActions.includes('Deny'),
       'the binding denies by the policy')

const rules = policy.spec.matchConstraints.resourceRules
expect(rules.some(r => r.resources.includes('pods') && r.operations.includes('CREATE') && r.operations.includes('UPDATE')) &&
       rules.some(r => r.resources.includes('pods/ephemeralcontainers') && r.operations.includes('UPDATE')),
       'the policy checks pods at CREATE and UPDATE, and the ephemeral containers kubectl debug adds')

function admit (spec, pod, namespace) {
  const vars = {object: pod, namespaceObject: namespace, oldObject: null, request: {operation: 'CREATE'}}
  const variables = {}
  for (const v of spec.variables) {
    variables[v.name] = cel.evaluate(v.expression, {...vars, variables})
  }
  for (const v of spec.validations) {
    if (cel.evaluate(v.expression, {...vars, variables}) !== true) {
      return {allowed: false, message: cel.evaluate(v.messageExpression, {...vars, variables})}
    }
  }
  return {allowed: true}
}

function ns (name, tenant) {
  return {metadata: tenant ? {name, labels: {'gpuslice.io/tenant': tenant}} : {name}}
}
// gpu: true for nvidia.com/gpu, or the name of the resource; kind: limits or requests.
function pod (annotations, gpu = true, where = 'containers', kind = 'limits') {
  const c = {name: 'main', image: 'x'}
  if (gpu) c.resources = {[kind]: {[gpu === true ? 'nvidia.com/gpu' : gpu]: 1}}
  const p = {metadata: {name: 'p', namespace: 'n'}, spec: {containers: [{name: 'side', image: 'x'}]}}
  p.spec[where] = [...(p.spec[where] || []), c]
  if (annotations) p.metadata.annotations = annotations
  return p
}
// Adds a container to p.spec[where] with NVIDIA_VISIBLE_DEVICES = value
// (null: from a ConfigMap; undefined: no such variable, an unrelated one).
function withEnv (p, where, value) {
  const env = value === undefined ? [{name: 'FOO', value: 'bar'}]
    : value === null ? [{name: 'NVIDIA_VISIBLE_DEVICES', valueFrom: {configMapKeyRef: {name: 'gpus', key: 'devices'}}}]
      : [{name: 'NVIDIA_VISIBLE_DEVICES', value}]
  p.spec[where] = [...(p.spec[where] || []), {name: 'env-' + where.toLowerCase(), image: 'x', env}]
  return p
}
// Adds a container whose NVIDIA_VISIBLE_DEVICES the policy cannot read:
// how = 'expand' ($(DEV), DEV naming team-b before it), 'fieldRef' (the
// pod's own annotation, which names team-b).
function withIndirectEnv (p, how) {
  const env = how === 'expand'
    ? [{name: 'DEV', value: 'gpuslice.io/tenant=team-b'}, {name: 'NVIDIA_VISIBLE_DEVICES', value: '$(DEV)'}]
    : [{name: 'NVIDIA_VISIBLE_DEVICES', valueFrom: {fieldRef: {fieldPath: "metadata.annotations['devices']"}}}]
  if (how !== 'expand') p.metadata.annotations = {...(p.metadata.annotations || {}), devices: 'gpuslice.io/tenant=team-b'}
  p.spec.containers = [...p.spec.containers, {name: 'indirect', image: 'x', env}]
  return p
}
// Adds a hostPath volume of `path`, mounted by the first container.
function withHostPath (p, path) {
  p.spec.volumes = [...(p.spec.volumes || []), {name: 'host', hostPath: {path}}]
  p.spec.containers[0].volumeMounts = [{name: 'host', mountPath: '/host'}]
  return p
}
// A DRA claim from a ResourceClaimTemplate, used by the pod's first container.
function withClaim (p) {
  p.spec.resourceClaims = [{name: 'gpu', resourceClaimTemplateName: 'one-gpu'}]
  p.spec.containers[0].resources = {claims: [{name: 'gpu'}]}
  return p
}
const A = ns('team-a', 'team-a')
const plain = ns('default')
const system = {metadata: {name: 'gpuslice-system', labels: {'gpuslice.io/system': 'true'}}}
const cases = [
  ['names its own tenant', pod({'cdi.k8s.io/gpuslice': 'gpuslice.io/tenant=team-a'}), A, true],
  ['names another tenant', pod({'cdi.k8s.io/gpuslice': 'gpuslice.io/tenant=team-b'}), A, false, 'team-a'],
  ['names another tenant under another CDI key', pod({'cdi.k8s.io/gpuslice': 'gpuslice.io/tenant=team-a',
    'cdi.k8s.io/x': 'gpuslice.io/tenant=team-b'}), A, false, 'team-a'],
  ['hides another tenant in a list of devices', pod({'cdi.k8s.io/gpuslice':
    'nvidia.com/gpu=0,gpuslice.io/tenant=team-b'}), A, false, 'team-a'],
  ['hides another tenant behind a space', pod({'cdi.k8s.io/gpuslice': 'gpuslice.io/tenant=team-a, gpuslice.io/tenant=team-b'}),
    A, false, 'team-a'],
  ['names two devices, its tenant among them', pod({'cdi.k8s.io/gpuslice': 'nvidia.com/gpu=0,gpuslice.io/tenant=team-a'}),
    A, true],
  ['names another tenant through the hook annotation', pod({'gpuslice.io/tenant': 'team-b'}), A, false, 'team-a'],
  ['names its own tenant through the hook annotation', pod({'gpuslice.io/tenant': 'team-a'}, false), A, true],
  ['uses a GPU without naming its tenant', pod(null), A, false, 'cdi.k8s.io/gpuslice: gpuslice.io/tenant=team-a'],
  ['uses a GPU in an init container without naming its tenant', pod({}, true, 'initContainers'), A, false,
    'must name their gpuslice tenant'],
  ['uses no GPU and names no tenant', pod(null, false), A, true],
  ['names a tenant from a namespace without one', pod({'cdi.k8s.io/gpuslice': 'gpuslice.io/tenant=team-a'}), plain,
    false, 'has no gpuslice.io/tenant label'],
  ['uses the hook annotation from a namespace without a tenant', pod({'gpuslice.io/tenant': 'team-a'}), plain, false,
    'has no gpuslice.io/tenant label'],
  ['uses a GPU without gpuslice in a namespace without a tenant', pod(null), plain, true],
  ['names an empty tenant from a namespace without one', pod({'cdi.k8s.io/gpuslice': 'gpuslice.io/tenant='}), plain,
    false, 'has no gpuslice.io/tenant label'],
  ['carries unrelated CDI devices', pod({'cdi.k8s.io/net': 'vendor.com/nic=eth1'}, false), plain, true],
  // Every other way to a GPU (issue 23): the environment the NVIDIA runtime
  // reads, in any container; the shared and MIG resource names; DRA resource
  // claims; NVIDIA's own CDI devices. Each was admitted before.
  ['names another tenant in NVIDIA_VISIBLE_DEVICES', withEnv(pod(null, false), 'containers',
    'gpuslice.io/tenant=team-b,nvidia.com/gpu=all'), A, false, 'NVIDIA_VISIBLE_DEVICES'],
  ['names another tenant in an init container\'s NVIDIA_VISIBLE_DEVICES', withEnv(pod(null, false), 'initContainers',
    'gpuslice.io/tenant=team-b'), A, false, 'NVIDIA_VISIBLE_DEVICES'],
  ['names another tenant in an ephemeral container\'s NVIDIA_VISIBLE_DEVICES',
    withEnv(pod({'cdi.k8s.io/gpuslice': 'gpuslice.io/tenant=team-a'}), 'ephemeralContainers', 'gpuslice.io/tenant=team-b'),
    A, false, 'NVIDIA_VISIBLE_DEVICES'],
  ['names another tenant in NVIDIA_VISIBLE_DEVICES beside its own CDI annotation',
    withEnv(pod({'cdi.k8s.io/gpuslice': 'gpuslice.io/tenant=team-a'}), 'containers', 'gpuslice.io/tenant=team-b'),
    A, false, 'NVIDIA_VISIBLE_DEVICES'],
  ['asks for every GPU with NVIDIA_VISIBLE_DEVICES=all', withEnv(pod(null, false), 'containers', 'all'), A, false,
    'NVIDIA_VISIBLE_DEVICES'],
  ['takes NVIDIA_VISIBLE_DEVICES from a ConfigMap', withEnv(pod(null, false), 'containers', null), A, false,
    'NVIDIA_VISIBLE_DEVICES'],
  ['names a tenant in NVIDIA_VISIBLE_DEVICES from a namespace without one', withEnv(pod(null, false), 'containers',
    'gpuslice.io/tenant=team-b'), plain, false, 'has no gpuslice.io/tenant label'],
  ['uses a shared GPU (nvidia.com/gpu.shared) without naming its tenant', pod(null, 'nvidia.com/gpu.shared'), A, false,
    'must name their gpuslice tenant'],
  ['uses a shared GPU in an init container without naming its tenant', pod(null, 'nvidia.com/gpu.shared',
    'initContainers'), A, false, 'must name their gpuslice tenant'],
  ['requests a MIG device without naming its tenant', pod(null, 'nvidia.com/mig-1g.5gb', 'containers', 'requests'), A,
    false, 'must name their gpuslice tenant'],
  ['claims a GPU through DRA without naming its tenant', withClaim(pod(null, false)), A, false,
    'must name their gpuslice tenant'],
  ['asks for NVIDIA\'s CDI device without naming its tenant', pod({'cdi.k8s.io/gpu': 'nvidia.com/gpu=all'}, false), A,
    false, 'must name their gpuslice tenant'],
  ['uses a GPU named only through the hook annotation', pod({'gpuslice.io/tenant': 'team-a'}), A, false,
    'must name their gpuslice tenant'],
  // ... and what a pod that names its tenant may still do.
  ['uses a shared GPU and names its tenant', pod({'cdi.k8s.io/gpuslice': 'gpuslice.io/tenant=team-a'},
    'nvidia.com/gpu.shared'), A, true],
  ['claims a GPU through DRA and names its tenant', withClaim(pod({'cdi.k8s.io/gpuslice': 'gpuslice.io/tenant=team-a'},
    false)), A, true],
  ['names its tenant through both annotations', pod({'cdi.k8s.io/gpuslice': 'gpuslice.io/tenant=team-a',
    'gpuslice.io/tenant': 'team-a'}), A, true],
  ['hides every GPU with NVIDIA_VISIBLE_DEVICES=void', withEnv(pod(null, false), 'containers', 'void'), A, true],
  ['adds a debugging container to a pod that names its tenant', withEnv(pod({'cdi.k8s.io/gpuslice':
    'gpuslice.io/tenant=team-a'}), 'ephemeralContainers', undefined), A, true],
  ['sets NVIDIA_VISIBLE_DEVICES=all in a namespace without a tenant', withEnv(pod(null, false), 'containers', 'all'),
    plain, true],
  // The third security review's bypasses (issue 40), each admitted before:
  // another tenant named where the policy did not read, and the host's
  // device and run directories mounted.
  ['names another tenant through $(VAR) in NVIDIA_VISIBLE_DEVICES', withIndirectEnv(pod(null, false), 'expand'), plain,
    false, 'nor set it with valueFrom or $(VAR)'],
  ['names another tenant through a fieldRef to its annotation', withIndirectEnv(pod(null, false), 'fieldRef'), plain,
    false, 'nor set it with valueFrom or $(VAR)'],
  ['names another tenant through $(VAR) beside its own tenant', withIndirectEnv(pod({'cdi.k8s.io/gpuslice':
    'gpuslice.io/tenant=team-a'}), 'expand'), A, false, 'NVIDIA_VISIBLE_DEVICES'],
  ['names another tenant through a fieldRef beside its own tenant', withIndirectEnv(pod({'cdi.k8s.io/gpuslice':
    'gpuslice.io/tenant=team-a'}), 'fieldRef'), A, false, 'NVIDIA_VISIBLE_DEVICES'],
  ['names another tenant under NVIDIA\'s CDI prefix', pod({'cdi.k8s.io/gpuslice': 'gpuslice.io/tenant=team-a',
    'nvidia.cdi.k8s.io/gpu': 'gpuslice.io/tenant=team-b'}), A, false, 'may name only the gpuslice tenant team-a'],
  ['names a tenant under NVIDIA\'s CDI prefix from a namespace without one', pod({'nvidia.cdi.k8s.io/gpu':
    'gpuslice.io/tenant=team-b'}, false), plain, false, 'has no gpuslice.io/tenant label'],
  ['names its own tenant under NVIDIA\'s CDI prefix', pod({'nvidia.cdi.k8s.io/gpuslice': 'gpuslice.io/tenant=team-a'}),
    A, true],
  ['mounts the run directory', withHostPath(pod({'cdi.k8s.io/gpuslice': 'gpuslice.io/tenant=team-a'}), '/run/gpuslice'),
    A, false, 'may not mount from the host'],
  ['mounts the run directory from a namespace without a tenant', withHostPath(pod(null, false), '/run/gpuslice'), plain,
    false, 'may not mount from the host'],
  ['mounts another tenant\'s directory', withHostPath(pod(null, false), '/var/run/gpuslice/tenants/team-b/'), plain,
    false, 'may not mount from the host'],
  ['mounts the device directory', withHostPath(pod(null, false), '/dev'), plain, false, 'may not mount from the host'],
  ['mounts a GPU\'s device node', withHostPath(pod(null, false), '/dev/nvidia0'), A, false,
    'may not mount from the host'],
  ['mounts the host\'s root', withHostPath(pod(null, false), '/'), plain, false, 'may not mount from the host'],
  ['mounts /run', withHostPath(pod(null, false), '/run/'), plain, false, 'may not mount from the host'],
  ['mounts the run directory by a path with //', withHostPath(pod(null, false), '/run//gpuslice'), plain, false,
    'may not mount from the host'],
  ['mounts the run directory by a path with ..', withHostPath(pod(null, false), '/var/lib/../../run/gpuslice'), plain,
    false, 'may not mount from the host'],
  ['mounts the CDI directory', withHostPath(pod(null, false), '/etc/cdi'), plain, false, 'may not mount from the host'],
  ['mounts a data directory', withHostPath(pod(null, false), '/var/lib/data'), plain, true],
  ['mounts a directory named like /devices', withHostPath(pod(null, false), '/devices'), plain, true],
  ['mounts the run directory in gpuslice\'s own namespace', withHostPath(pod(null, false), '/run/gpuslice'), system,
    true]
]
for (const [what, p, n, allowed, message] of cases) {
  let result
  try {
    result = admit(policy.spec, p, n)
  } catch (e) {
    result = {error: e.message}
  }
  const ok = !result.error && result.allowed === allowed && (allowed || result.message.includes(message))
  expect(ok, `CEL: a pod that ${what} in namespace ${n.metadata.name} is ${allowed ? 'allowed' : 'denied'}` +
         (result.message ? ` ("${result.message}")` : '') + (result.error ? ` (error: ${result.error})` : ''))
}
// The example pods pass the policy in their own namespaces, and would be
// denied in each other's.
const examplePods = docs.filter(d => d.file === 'example-pods.yaml' && d.obj.kind === 'Pod').map(d => d.obj)
const exampleNs = Object.fromEntries(docs.filter(d => d.file === 'example-pods.yaml' && d.obj.kind === 'Namespace')
  .map(d => [d.obj.metadata.name, d.obj]))
for (const p of examplePods) {
  const own = admit(policy.spec, p, exampleNs[p.metadata.namespace])
  const other = Object.keys(exampleNs).find(n => n !== p.metadata.namespace)
  const theirs = admit(policy.spec, p, exampleNs[other])
  expect(own.allowed && !theirs.allowed, `CEL: example pod ${p.metadata.name} is allowed in ${p.metadata.namespace}` +
         ` and denied in ${other}`)
}
// gpuslice's own pods (the DaemonSet's, the uninstall Job's) mount the run
// directory: admitted in its namespace as shipped, denied in a tenant's.
const systemNs = docs.find(d => d.file === 'namespace.yaml' && d.obj.kind === 'Namespace').obj
for (const d of docs.filter(d => d.obj.kind === 'DaemonSet' || d.obj.kind === 'Job')) {
  const p = {metadata: {name: d.obj.metadata.name, namespace: systemNs.metadata.name,
    ...d.obj.spec.template.metadata}, spec: d.obj.spec.template.spec}
  const own = admit(policy.spec, p, systemNs)
  const theirs = admit(policy.spec, p, A)
  expect(own.allowed && !theirs.allowed, `CEL: ${d.obj.kind} ${d.obj.metadata.name}'s pod is allowed in ` +
         `${systemNs.metadata.name} (${own.message || 'allowed'}) and denied in team-a (${theirs.message || 'allowed'})`)
}
// Negative control: a policy that forgot one CDI key lets a claim through.
const weakened = JSON.parse(JSON.stringify(policy.spec))
weakened.variables.find(v => v.name === 'cdiClaimsOther').expression =
  "'cdi.k8s.io/gpuslice' in variables.annotations && variables.annotations['cdi.k8s.io/gpuslice'] != 'gpuslice.io/tenant=' + variables.tenant"
expect(admit(weakened, cases[2][1], A).allowed === true,
       'negative control: a weaker policy (one CDI key only) would let a claim under another key through')
// ... and one that forgot ephemeral containers lets kubectl debug name another tenant.
const noEphemeral = JSON.parse(JSON.stringify(policy.spec))
const envSelects = noEphemeral.variables.find(v => v.name === 'envSelects')
envSelects.expression = envSelects.expression.replace(/\|\|\s*\(has\(object\.spec\.ephemeralContainers\)[\s\S]*$/, '')
const debugCase = cases.find(c => c[0].includes('ephemeral container'))
expect(!envSelects.expression.includes('ephemeral') && admit(noEphemeral, debugCase[1], A).allowed === true,
       'negative control: a policy without the ephemeral containers would let one name another tenant')

// ---- Dynamic Resource Allocation --------------------------------------------
// The DeviceClass's selector compiles and selects gpuslice.io's devices
// (as the slice gpuslice-dra publishes has them) and no other driver's.
const deviceClass = docs.find(d => d.obj.kind === 'DeviceClass').obj
const selectors = deviceClass.spec.selectors.map(sel => sel.cel.expression)
function selects (device) {
  return selectors.every(e => cel.evaluate(e, {device}) === true)
}
const ourDevice = {driver: 'gpuslice.io', attributes: {'gpuslice.io': {uuid: 'GPU-0', productName: 'H100'}},
  capacity: {'gpuslice.io': {share: 100, memory: 85899345920}}}
expect(deviceClass.metadata.name === 'gpuslice.io' && selectors.length > 0 && selects(ourDevice) &&
       !selects({...ourDevice, driver: 'gpu.nvidia.com'}),
       `DeviceClass ${deviceClass.metadata.name}: its CEL selector compiles, selects gpuslice.io's devices and not gpu.nvidia.com's`)
let brokenSelector = null
try { cel.evaluate('device.driver == ', {device: ourDevice}) } catch (e) { brokenSelector = e.message.split('\n')[0] }
expect(brokenSelector !== null, `negative control: a selector that does not compile is found (${brokenSelector})`)

// The claim templates ask for this class, with share and memory within a
// GPU's (100, and at least the default policy's least memory), and their
// opaque configuration is gpuslice.io/v1 SliceConfig with known fields.
for (const {file, obj} of docs.filter(d => d.obj.kind === 'ResourceClaimTemplate')) {
  const requests = obj.spec.spec.devices.requests
  const ok = requests.every(r => r.exactly && r.exactly.deviceClassName === deviceClass.metadata.name &&
    Number(r.exactly.capacity.requests.share) >= 1 && Number(r.exactly.capacity.requests.share) <= 100 &&
    /^[0-9]+(Mi|Gi)$/.test(r.exactly.capacity.requests.memory))
  const configs = (obj.spec.spec.devices.config || []).filter(c => c.opaque && c.opaque.driver === 'gpuslice.io')
  const known = ['apiVersion', 'kind', 'limit', 'class', 'preempt_ms']
  const configOk = configs.every(c => c.opaque.parameters.apiVersion === 'gpuslice.io/v1' &&
    c.opaque.parameters.kind === 'SliceConfig' && Object.keys(c.opaque.parameters).every(k => known.includes(k)))
  expect(ok && configOk, `${file}: ResourceClaimTemplate ${obj.metadata.name} asks for ${deviceClass.metadata.name} with a share and memory, ` +
         'its SliceConfig has only known fields')
}
for (const {file, obj} of docs.filter(d => d.obj.kind === 'Pod' && d.obj.spec.resourceClaims)) {
  const templates = new Set(docs.filter(d => d.obj.kind === 'ResourceClaimTemplate' &&
    d.obj.metadata.namespace === obj.metadata.namespace).map(d => d.obj.metadata.name))
  const claims = obj.spec.resourceClaims
  const used = obj.spec.containers.flatMap(c => ((c.resources || {}).claims || []).map(x => x.name))
  expect(claims.every(c => templates.has(c.resourceClaimTemplateName)) && claims.every(c => used.includes(c.name)),
         `${file}: Pod ${obj.metadata.name}'s claims name templates of its namespace and its containers use them`)
  // No namespace tenant: the entitlement policy lets a claim through.
  const nsObj = docs.find(d => d.obj.kind === 'Namespace' && d.obj.metadata.name === obj.metadata.namespace).obj
  const r = admit(policy.spec, obj, nsObj)
  expect(r.allowed, `CEL: ${file}: Pod ${obj.metadata.name} is allowed in ${nsObj.metadata.name} (${r.message || 'allowed'})`)
}

// gpuslice-dra writes only its own node's ResourceSlice.
const draPolicy = docs.find(d => d.obj.kind === 'ValidatingAdmissionPolicy' && d.obj.metadata.name === 'gpuslice-dra-own-node').obj
const draBinding = docs.find(d => d.obj.kind === 'ValidatingAdmissionPolicyBinding' && d.obj.spec.policyName === draPolicy.metadata.name)
expect(draBinding && draBinding.obj.spec.validationActions.includes('Deny'), 'a binding denies by gpuslice-dra-own-node')
const draSa = docs.find(d => d.obj.kind === 'ServiceAccount' && d.obj.metadata.name === 'gpuslice-dra').obj
const draUser = `system:serviceaccount:${draSa.metadata.namespace}:${draSa.metadata.name}`
function sliceWrite (operation, sliceNode, userNode, username = draUser) {
  const slice = {metadata: {name: 's'}, spec: {driver: 'gpuslice.io', nodeName: sliceNode}}
  const userInfo = {username}
  if (userNode !== null) userInfo.extra = {'authentication.kubernetes.io/node-name': [userNode]}
  const vars = {object: operation === 'DELETE' ? null : slice, oldObject: operation === 'CREATE' ? null : slice,
    request: {operation, userInfo}}
  if (!draPolicy.spec.matchConditions.every(m => cel.evaluate(m.expression, vars) === true)) return {allowed: true, matched: false}
  const variables = {}
  for (const v of draPolicy.spec.variables) variables[v.name] = cel.evaluate(v.expression, {...vars, variables})
  for (const v of draPolicy.spec.validations) {
    if (cel.evaluate(v.expression, {...vars, variables}) !== true) {
      return {allowed: false, message: cel.evaluate(v.messageExpression, {...vars, variables})}
    }
  }
  return {allowed: true}
}
for (const [what, args, allowed] of [
  ['creating its own node\'s slice', ['CREATE', 'node-1', 'node-1'], true],
  ['updating its own node\'s slice', ['UPDATE', 'node-1', 'node-1'], true],
  ['creating another node\'s slice', ['CREATE', 'node-2', 'node-1'], false],
  ['updating another node\'s slice', ['UPDATE', 'node-2', 'node-1'], false],
  ['deleting another node\'s slice', ['DELETE', 'node-2', 'node-1'], false],
  ['a token not bound to a pod (no node name)', ['CREATE', 'node-1', null], false],
]) {
  const r = sliceWrite(...args)
  expect(r.allowed === allowed, `CEL: gpuslice-dra-own-node: ${what} is ${allowed ? 'allowed' : 'denied'} (${r.message || 'allowed'})`)
}
const other = sliceWrite('CREATE', 'node-2', 'node-1', 'system:serviceaccount:kube-system:other-driver')
expect(other.allowed && other.matched === false, 'CEL: gpuslice-dra-own-node leaves other users\' slices alone')
const ds2 = docs.find(d => d.obj.kind === 'DaemonSet' && d.obj.metadata.name === 'gpuslice-server').obj.spec.template.spec
const dra = ds2.containers.find(c => c.name === 'dra')
const tokenVolume = ds2.volumes.find(v => v.projected && v.projected.sources.some(x => x.serviceAccountToken))
expect(ds2.serviceAccountName === draSa.metadata.name && ds2.automountServiceAccountToken === false && dra && tokenVolume &&
       dra.volumeMounts.some(m => m.name === tokenVolume.name) &&
       ds2.containers.filter(c => c.name !== 'dra').every(c => !c.volumeMounts.some(m => m.name === tokenVolume.name)),
       'the DaemonSet runs gpuslice-dra as its service account, with the token mounted into that container alone')
const claimsMount = c => c.volumeMounts.find(m => m.mountPath === '/var/lib/gpuslice/claims.d')
const serverC = ds2.containers.find(c => c.name === 'server')
expect(claimsMount(dra) && claimsMount(serverC) && claimsMount(serverC).readOnly === true &&
       claimsMount(dra).name === claimsMount(serverC).name &&
       serverC.command.includes('--config-dir=/var/lib/gpuslice/claims.d') && dra.command.includes('--claims-dir=/var/lib/gpuslice/claims.d'),
       'gpuslice-dra writes the claims\' tenant files where the server reads them (its second --config-dir)')

finish()
