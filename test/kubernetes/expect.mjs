// The tally of the offline validators (validate.mjs, names.mjs,
// ../dra/kube_schema.mjs): expect() prints a line per check, finish() the
// totals, and exits 1 if any check failed. The counts are this module's,
// one script per process.
let passed = 0
let failed = 0

export function expect (cond, what) {
  if (cond) {
    passed++
    console.log('ok: ' + what)
  } else {
    failed++
    console.log('FAILED: ' + what)
  }
}

export function finish () {
  console.log(`${passed} passed, ${failed} failed`)
  process.exit(failed ? 1 : 0)
}
