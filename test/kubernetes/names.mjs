// Names and label values in deploy/kubernetes stay short enough that a
// user's prefix or namespace never breaks an install: every resource name
// (metadata.name of every object and pod template, and every name that
// refers to another object: a container, a volume, a ConfigMap, a service
// account, a priority class, a policy...) has at most 40 characters after
// the kustomization's namePrefix and nameSuffix, and every label value
// (metadata.labels, selectors, node selectors) at most 63, the API's own
// limit. Scans every .yaml and .yml file under the directory, whatever
// objects it holds. A negative control shows that each limit can fail.
//
//   node names.mjs DEPLOY_DIR NODE_MODULES_DIR
import fs from 'node:fs'
import path from 'node:path'
import {createRequire} from 'node:module'
import {expect, finish} from './expect.mjs'

const [deployDir, modulesDir] = process.argv.slice(2)
const require = createRequire(path.join(modulesDir, 'package.json'))
const YAML = require('yaml')

const NAME_MAX = 40
const LABEL_VALUE_MAX = 63

function yamlFiles (dir) {
  return fs.readdirSync(dir, {withFileTypes: true}).flatMap(e => {
    const p = path.join(dir, e.name)
    if (e.isDirectory()) return yamlFiles(p)
    return /\.ya?ml$/.test(e.name) ? [p] : []
  }).sort()
}

// Keys whose value is a map of labels, and keys whose string value names
// an object. Environment variables, ports and the admission policy's CEL
// variables have names of other kinds.
const LABEL_MAPS = new Set(['labels', 'matchLabels', 'nodeSelector'])
const NOT_OBJECT_NAMES = new Set(['env', 'ports', 'variables'])
function isObjectNameKey (key) {
  return key === 'name' || key === 'namespace' || /[a-z]Name$/.test(key)
}

// Walks one document: [names, label values], each as [where, value].
function scan (node, where, out, skipNames) {
  if (Array.isArray(node)) {
    node.forEach((item, i) => scan(item, `${where}[${i}]`, out, skipNames))
    return out
  }
  if (!node || typeof node !== 'object') return out
  for (const [key, value] of Object.entries(node)) {
    const at = `${where}.${key}`
    if (LABEL_MAPS.has(key) && value && typeof value === 'object' && !Array.isArray(value)) {
      for (const [k, v] of Object.entries(value)) out.labels.push([`${at}[${k}]`, String(v)])
    } else if (typeof value === 'string' && isObjectNameKey(key) && !skipNames) {
      out.names.push([at, value])
    } else if (key !== 'annotations') {
      scan(value, at, out, skipNames || NOT_OBJECT_NAMES.has(key))
    }
  }
  return out
}

function judge (docs, affix, label) {
  const names = []
  const labels = []
  for (const {file, obj} of docs) {
    const out = scan(obj, `${file}:${obj.kind}`, {names: [], labels: []}, false)
    // The kustomization's prefix and suffix lengthen the objects' own names.
    for (const [at, n] of out.names) names.push([at, /\.metadata\.name$/.test(at) ? affix + n.length : n.length, n])
    labels.push(...out.labels)
  }
  const long = names.filter(([, len]) => len > NAME_MAX)
  const longest = names.reduce((a, b) => (b[1] > a[1] ? b : a), ['', 0, ''])
  const longLabels = labels.filter(([, v]) => v.length > LABEL_VALUE_MAX)
  return {
    names: [long.length === 0, `${label}: ${names.length} resource names have at most ${NAME_MAX} characters` +
      `${affix ? ` with the kustomization's ${affix}-character prefix and suffix` : ''} ` +
      `(longest ${longest[1]}: ${longest[2]} at ${longest[0]}) ${long.length ? JSON.stringify(long) : ''}`],
    labels: [longLabels.length === 0, `${label}: ${labels.length} label values have at most ${LABEL_VALUE_MAX} ` +
      `characters ${longLabels.length ? JSON.stringify(longLabels) : ''}`]
  }
}

const docs = []
let affix = 0
for (const file of yamlFiles(deployDir)) {
  const rel = path.relative(deployDir, file)
  for (const doc of YAML.parseAllDocuments(fs.readFileSync(file, 'utf8'))) {
    expect(doc.errors.length === 0, `${rel}: parses as YAML ${doc.errors.join('; ')}`)
    const obj = doc.toJS()
    if (!obj) continue
    if (obj.kind === 'Kustomization') {
      affix += String(obj.namePrefix || '').length + String(obj.nameSuffix || '').length
      continue
    }
    docs.push({file: rel, obj})
  }
}
expect(docs.length > 0, `${docs.length} objects in ${deployDir}`)
const result = judge(docs, affix, 'deploy/kubernetes')
expect(...result.names)
expect(...result.labels)

// Negative controls: one name a character too long, one label value too.
const control = judge([{file: 'control.yaml', obj: {
  kind: 'ConfigMap',
  metadata: {name: 'n'.repeat(NAME_MAX + 1), labels: {app: 'v'.repeat(LABEL_VALUE_MAX + 1)}}
}}], 0, 'control')
expect(!control.names[0], `negative control: a ${NAME_MAX + 1}-character name fails`)
expect(!control.labels[0], `negative control: a ${LABEL_VALUE_MAX + 1}-character label value fails`)

finish()
