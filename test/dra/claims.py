"""ResourceClaims as the API server serves them (resource.k8s.io/v1), for
gpuslice-dra's tests: a claim of one request "gpu" of device class
gpuslice.io, its allocation on a node's pool, its results and their
consumed capacity, and opaque configuration (SliceConfig)."""


def claim(name, status, uid, namespace="default", share="25", memory="8Gi"):
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace, "uid": uid, "resourceVersion": "7",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpuslice.io", "capacity": {"requests": {"share": share, "memory": memory}}}}]}},
            "status": status}


def allocated(results, configs=(), node="node-a"):
    return {"allocation": {"devices": {"results": results, "config": list(configs)},
                           "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                               {"key": "metadata.name", "operator": "In", "values": [node]}]}]}},
            "reservedFor": [{"resource": "pods", "name": "pod-a", "uid": "0e1f2a3b-4c5d-4e6f-8a9b-0c1d2e3f4a5b"}]}


def result(device="gpu-0", share="25", memory="8Gi", request="gpu", pool="node-a",
           share_id="0f2e4d6c-1b3a-4958-8776-a5b4c3d2e1f0"):
    consumed = {}
    if share is not None:
        consumed["share"] = share
    if memory is not None:
        consumed["memory"] = memory
    return {"request": request, "driver": "gpuslice.io", "pool": pool, "device": device,
            "shareID": share_id, "consumedCapacity": consumed}


def config(source, parameters, requests=None):
    entry = {"source": source, "opaque": {"driver": "gpuslice.io", "parameters": parameters}}
    if requests is not None:
        entry["requests"] = requests
    return entry


def slice_config(**fields):
    return dict({"apiVersion": "gpuslice.io/v1", "kind": "SliceConfig"}, **fields)


def slice_claim(name, uid, share, memory, configs=(), namespace="default", node="node-a", device="gpu-0"):
    """A claim of one device, allocated on node's pool, consuming share
    and memory (quantities as text)."""
    return claim(name, allocated([result(device, share, memory, pool=node, share_id=uid)], configs, node), uid,
                 namespace, share, memory)
