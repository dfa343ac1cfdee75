// What the offline checks of Kubernetes objects share (validate.mjs for
// deploy/kubernetes, test/dra/kube_schema.mjs for gpuslice-dra's API
// traffic): the kubernetes-models model of an object, its schema errors,
// and the fields the API does not define, looked up in the models' type
// declarations (the schemas accept fields they do not define, where the
// API server, and kubectl's default strict field validation, refuse them).
//
//   const schema = kubernetesSchema(modulesDir)
//   await schema.model(obj)              the model class, or null
//   schema.schemaErrors(Model, obj)      null, or the first error line
//   schema.unknownFields(obj, schema.modelFile(obj), obj.kind, [], options)
//
// unknownFields' options, both off by default (as validate.mjs has always
// checked): maps: look into the values of maps whose values are API
// types (a Device's attributes and capacity, a result's consumedCapacity);
// freeForm: an object with no declared field (RawExtension, such as an
// opaque configuration's parameters) holds any fields. quantityStrings:
// report a Quantity that is not a string (the schema also takes numbers;
// the API server writes quantities as strings).
import fs from 'node:fs'
import path from 'node:path'
import {pathToFileURL} from 'node:url'

const QUANTITY = 'IIoK8sApimachineryPkgApiResourceQuantity'

export function kubernetesSchema (modulesDir) {
  const modelsDir = path.join(modulesDir, 'node_modules', 'kubernetes-models')
  const models = new Map()

  // kubernetes-models is an ES module package: a model is imported from its file.
  async function model (obj) {
    const key = `${obj.apiVersion}/${obj.kind}`
    if (!models.has(key)) {
      const file = path.join(modelsDir, obj.apiVersion, obj.kind + '.js')
      models.set(key, fs.existsSync(file) ? (await import(pathToFileURL(file).href))[obj.kind] : null)
    }
    return models.get(key)
  }

  function schemaErrors (Model, obj) {
    try {
      new Model(JSON.parse(JSON.stringify(obj))).validate()
      return null
    } catch (e) {
      return e.message.split('\n')[0]
    }
  }

  const declared = new Map()
  function declaration (file) {
    if (declared.has(file)) return declared.get(file)
    const text = fs.readFileSync(file, 'utf8')
    const imports = new Map()
    for (const m of text.matchAll(/^import \{ (\w+) \} from "([^"]+)";$/gm)) {
      const target = m[2].startsWith('.') ? path.join(path.dirname(file), m[2]) : path.join(modulesDir, 'node_modules', m[2])
      imports.set(m[1], target.replace(/\.js$/, '') + '.d.ts')
    }
    const body = text.match(/^export interface \w+(?: extends TypeMeta)? \{\n([\s\S]*?)^\}/m)
    let fields = null // a type alias (Quantity, Time, IntOrString...): a leaf
    const maps = new Map() // field -> the type of its map's values
    if (body) {
      fields = new Map()
      for (const m of body[1].matchAll(/^ {4}"([^"]+)"\??: (.+?);?$/gm)) fields.set(m[1], m[2])
      for (const m of body[1].matchAll(/^ {4}"([^"]+)"\??: \{\n {8}\[key: string\]: (\w+);\n {4}\};?$/gm)) maps.set(m[1], m[2])
    }
    const d = {fields, imports, maps}
    declared.set(file, d)
    return d
  }

  function unknownFields (obj, file, where, out, options = {}) {
    const {fields, imports, maps} = declaration(file)
    if (!fields || obj === null || typeof obj !== 'object' || Array.isArray(obj)) return out
    if (options.freeForm && fields.size === 0) return out
    for (const [key, value] of Object.entries(obj)) {
      if (!fields.has(key)) {
        out.push(`${where}.${key}`)
        continue
      }
      const check = (type, v, at) => {
        if (options.quantityStrings && type === QUANTITY && typeof v !== 'string') out.push(`${at} (a quantity, not a string)`)
        if (imports.has(type)) unknownFields(v, imports.get(type), at, out, options)
      }
      if (options.maps && maps.has(key) && value && typeof value === 'object') {
        for (const [k, v] of Object.entries(value)) check(maps.get(key), v, `${where}.${key}.${k}`)
        continue
      }
      const type = fields.get(key).replace(/^Array<(\w+)>$/, '$1')
      if (!imports.has(type) && type !== QUANTITY) continue // a scalar, an enum or a free-form map
      for (const [i, v] of (Array.isArray(value) ? value.entries() : [[null, value]])) {
        check(type, v, i === null ? `${where}.${key}` : `${where}.${key}[${i}]`)
      }
    }
    return out
  }

  function modelFile (obj) {
    return path.join(modelsDir, obj.apiVersion, obj.kind + '.d.ts')
  }

  return {model, schemaErrors, unknownFields, modelFile}
}
