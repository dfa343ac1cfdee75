"""A kubelet stand-in for gpuslice-dra's tests: plugin registration and
the DRA node service called as the kubelet calls them, with the real
messages (dra/proto/, generated for python with protoc at build time)
through the real gRPC library (grpcio), on unix sockets.

    import kubelet
    info = kubelet.register("/.../plugins_registry/gpuslice.io-reg.sock")
    answer = kubelet.prepare(info.endpoint, [kubelet.claim("default", "uid-1", "gpu-claim")])
    answer.claims["uid-1"].devices[0].cdi_device_ids

The generated modules (pluginregistration_v1_pb2, dra_v1_pb2) are found
in GPUSLICE_KUBELET_PROTO_DIR (meson test sets it), or in the folder
given to load()."""
import importlib
import os
import sys

import grpc

# The gRPC paths the kubelet calls: its registration service's package is
# "pluginregistration", and the DRA services' packages are the full
# k8s.io.kubelet.pkg.apis.dra.VERSION (the names in supported_versions,
# "v1.DRAPlugin" and "v1beta1.DRAPlugin", are shorter than the paths).
REGISTRATION = "/pluginregistration.Registration/"
DRA_SERVICES = {
    "v1": "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/",
    "v1beta1": "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/",
}
TIMEOUT_S = 10.0

_modules = {}


def load(proto_dir=None):
    """The generated modules, as (pluginregistration_v1_pb2, dra_v1_pb2);
    imported from proto_dir, or GPUSLICE_KUBELET_PROTO_DIR, once."""
    if not _modules:
        folder = proto_dir or os.environ.get("GPUSLICE_KUBELET_PROTO_DIR")
        if not folder:
            raise ImportError("no folder of generated messages (GPUSLICE_KUBELET_PROTO_DIR)")
        if folder not in sys.path:
            sys.path.insert(0, folder)
        _modules["registration"] = importlib.import_module("pluginregistration_v1_pb2")
        _modules["dra"] = importlib.import_module("dra_v1_pb2")
    return _modules["registration"], _modules["dra"]


def call(socket_path, method, request, response_type, timeout=TIMEOUT_S):
    """One unary call of method (its full path) on the unix socket at
    socket_path, on a fresh channel: the decoded answer. A status other
    than OK raises grpc.RpcError (its .code() and .details())."""
    with grpc.insecure_channel("unix:" + socket_path) as channel:
        stub = channel.unary_unary(method, request_serializer=lambda message: message.SerializeToString(),
                                   response_deserializer=response_type.FromString)
        return stub(request, timeout=timeout)


def call_bytes(socket_path, method, payload, timeout=TIMEOUT_S):
    """One unary call with a request and an answer of raw bytes."""
    with grpc.insecure_channel("unix:" + socket_path) as channel:
        return channel.unary_unary(method)(payload, timeout=timeout)


def get_info(registry_socket, timeout=TIMEOUT_S):
    registration, _ = load()
    return call(registry_socket, REGISTRATION + "GetInfo", registration.InfoRequest(), registration.PluginInfo,
                timeout)


def notify(registry_socket, registered, error="", timeout=TIMEOUT_S):
    registration, _ = load()
    return call(registry_socket, REGISTRATION + "NotifyRegistrationStatus",
                registration.RegistrationStatus(plugin_registered=registered, error=error),
                registration.RegistrationStatusResponse, timeout)


def register(registry_socket, accept=True, error="", timeout=TIMEOUT_S):
    """What the kubelet's plugin watcher does with a new socket in
    plugins_registry: GetInfo, then NotifyRegistrationStatus (accepted,
    or refused with error). The PluginInfo."""
    info = get_info(registry_socket, timeout)
    notify(registry_socket, accept, error, timeout)
    return info


def claim(namespace, uid, name):
    _, dra = load()
    return dra.Claim(namespace=namespace, uid=uid, name=name)


def prepare(plugin_socket, claims, version="v1", timeout=TIMEOUT_S):
    """NodePrepareResources for claims (from claim()): the
    NodePrepareResourcesResponse, its claims keyed by UID."""
    _, dra = load()
    return call(plugin_socket, DRA_SERVICES[version] + "NodePrepareResources",
                dra.NodePrepareResourcesRequest(claims=claims), dra.NodePrepareResourcesResponse, timeout)


def unprepare(plugin_socket, claims, version="v1", timeout=TIMEOUT_S):
    """NodeUnprepareResources for claims: the
    NodeUnprepareResourcesResponse, its claims keyed by UID."""
    _, dra = load()
    return call(plugin_socket, DRA_SERVICES[version] + "NodeUnprepareResources",
                dra.NodeUnprepareResourcesRequest(claims=claims), dra.NodeUnprepareResourcesResponse, timeout)
