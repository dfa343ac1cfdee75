// Validates what gpuslice-dra exchanged with the test API endpoint (the
// bodies test/dra/apiserver.py received, the claims it served: one JSON
// object per file) against resource.k8s.io/v1's schema with
// kubernetes-models: the schema itself, then every field looked up in the
// models' declarations (inside maps such as a device's capacity too), and
// every quantity a string. Negative controls show each check fails on a
// slice with a misspelt field and on capacity values that are not
// strings.
//
//   node kube_schema.mjs RECORDED_DIR NODE_MODULES_DIR [LEAST_SLICES]
//
// LEAST_SLICES (default 2): how many slice bodies there must be at least.
import fs from 'node:fs'
import path from 'node:path'
import {kubernetesSchema} from '../kubernetes/schema.mjs'
import {expect, finish} from '../kubernetes/expect.mjs'

const [recordedDir, modulesDir, leastSlices = '2'] = process.argv.slice(2)
const schema = kubernetesSchema(modulesDir)
const options = {maps: true, freeForm: true, quantityStrings: true}

// The problems of one object: its schema's first error, then its unknown
// fields and quantities that are not strings.
async function problems (obj) {
  const Model = await schema.model(obj)
  if (!Model) return [`no schema for ${obj.apiVersion} ${obj.kind}`]
  const err = schema.schemaErrors(Model, obj)
  return (err ? [err] : []).concat(schema.unknownFields(obj, schema.modelFile(obj), obj.kind, [], options))
}

const files = fs.readdirSync(recordedDir).filter(f => f.endsWith('.json')).sort()
const counts = {}
let slice = null
let claimWithConfig = null
for (const file of files) {
  let obj
  try {
    obj = JSON.parse(fs.readFileSync(path.join(recordedDir, file), 'utf8'))
  } catch (e) {
    expect(false, `${file}: parses as JSON (${e.message})`)
    continue
  }
  const found = await problems(obj)
  expect(found.length === 0, `${file}: a valid ${obj.apiVersion} ${obj.kind} ${found.join('; ')}`)
  counts[obj.kind] = (counts[obj.kind] || 0) + 1
  if (obj.kind === 'ResourceSlice') slice = obj
  if (obj.kind === 'ResourceClaim' && obj.status?.allocation?.devices?.config?.length) claimWithConfig = obj
}
expect((counts.ResourceSlice || 0) >= Number(leastSlices) && (counts.ResourceClaim || 0) >= 2,
       `slices and claims were recorded (${JSON.stringify(counts)})`)

// Negative controls: each check must fail on what it is there to catch.
function broken (obj, change) {
  const copy = JSON.parse(JSON.stringify(obj))
  change(copy)
  return copy
}
if (slice) {
  const device = s => s.spec.devices[0]
  const controls = [
    ['a misspelt device field (allowMultipleAllocation)', s => {
      device(s).allowMultipleAllocation = device(s).allowMultipleAllocations
      delete device(s).allowMultipleAllocations
    }],
    ['a misspelt field inside a capacity (requestPolicies)', s => {
      const c = device(s).capacity.share
      c.requestPolicies = c.requestPolicy
      delete c.requestPolicy
    }],
    ['a misspelt field of a range (mininum)', s => {
      device(s).capacity.memory.requestPolicy.validRange.mininum = '1'
    }],
    ['a misspelt attribute type (str)', s => { device(s).attributes.uuid = {str: 'GPU-x'} }],
    ['a capacity value that is a number', s => { device(s).capacity.share.value = 100 }],
    ['a capacity value that is a boolean', s => { device(s).capacity.memory.value = true }],
    ['a capacity value that is no quantity', s => { device(s).capacity.memory.value = '80 GiB' }],
    ['a pool without its generation', s => { delete s.spec.pool.generation }]
  ]
  for (const [what, change] of controls) {
    const found = await problems(broken(slice, change))
    expect(found.length > 0, `negative control: a slice with ${what} is refused (${found.join('; ')})`)
  }
}
if (claimWithConfig) {
  // The opaque parameters are the driver's own (free-form to the API)...
  const found = await problems(broken(claimWithConfig, c => {
    c.status.allocation.devices.config[0].opaque.parameters.anything = {goes: 1}
  }))
  expect(found.length === 0, `a claim's opaque parameters hold any field (${found.join('; ')})`)
  // ...but the configuration around them is the API's.
  const typo = await problems(broken(claimWithConfig, c => { c.status.allocation.devices.config[0].sources = 'FromClaim' }))
  expect(typo.length > 0, `negative control: a claim with a misspelt config field is refused (${typo.join('; ')})`)
} else {
  expect(false, 'a claim with opaque configuration was recorded')
}

finish()
