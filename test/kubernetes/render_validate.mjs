// Validates objects rendered by recipes_test.py (kustomize_render.py's
// output for the base, each component and each overlay) against the
// Kubernetes OpenAPI schemas and the fields the API defines (schema.mjs, as
// validate.mjs checks the manifests themselves). Each entry says whether it
// must be valid; the negative controls are entries that must be refused.
//
//   node render_validate.mjs RENDERED_JSON NODE_MODULES_DIR
//   RENDERED_JSON: [{"label": "...", "obj": {...}, "valid": true|false}, ...]
import fs from 'node:fs'
import {kubernetesSchema} from './schema.mjs'

const [renderedFile, modulesDir] = process.argv.slice(2)
const entries = JSON.parse(fs.readFileSync(renderedFile, 'utf8'))
const schema = kubernetesSchema(modulesDir)

let failed = 0
for (const {label, obj, valid} of entries) {
  const Model = await schema.model(obj)
  const errors = []
  if (!Model) {
    errors.push(`no schema for ${obj.apiVersion} ${obj.kind}`)
  } else {
    const err = schema.schemaErrors(Model, obj)
    if (err) errors.push(err)
    const unknown = schema.unknownFields(obj, schema.modelFile(obj), obj.kind, [], {freeForm: true, maps: true})
    if (unknown.length) errors.push(`fields the API does not define: ${unknown}`)
  }
  const ok = valid ? errors.length === 0 : errors.length > 0
  if (!ok) failed++
  console.log(`${ok ? 'ok' : 'FAILED'}: ${label}: ${obj.kind} ${obj.metadata && obj.metadata.name} ` +
              `${valid ? 'is valid' : 'is refused'} (${errors.join('; ') || 'schema ok'})`)
}
console.log(`${entries.length - failed} passed, ${failed} failed`)
process.exit(failed ? 1 : 0)
