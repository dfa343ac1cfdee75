/*
 * The request policy the tests' slices are published with: kube_slice_test
 * checks the body it makes, kube_client publishes it for kube_test.py.
 */
#ifndef GPUSLICE_TEST_SLICE_POLICY_H
#define GPUSLICE_TEST_SLICE_POLICY_H

#include "kube.h"

static const struct dra_slice_policy test_slice_policy = {
    .share_total = 100,
    .share_default = 10,
    .share_min = 1,
    .memory_default = 1ull << 30,
    .memory_min = 256ull << 20,
    .memory_step = 256ull << 20,
};

#endif
