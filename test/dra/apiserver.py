"""A test Kubernetes API endpoint for gpuslice-dra: HTTPS on 127.0.0.1 with
a throwaway self-signed certificate (made with the openssl command), a
bearer token checked on every request, the ResourceClaims a test sets
served, Nodes (every name is one, until a test removes or re-creates it),
ResourceSlices kept (GET, LIST, POST, PUT with resourceVersion
conflicts, DELETE) as the API server keeps them, and failures on demand
(an HTTP status or a closed connection for the next requests). Every body
it receives and every claim it serves is written to a directory, for
validation against the schema afterwards. Standard library only.

As a module (tests):

    from apiserver import ApiServer
    api = ApiServer(directory)            # makes directory/ca.crt, token...
    api.start()
    env = api.env()                       # KUBERNETES_SERVICE_HOST and _PORT
    api.url, api.token_file, api.ca_file  # for kube_api_options
    api.set_claim(claim_dict)             # served by namespace and name
    api.fail_next(2, 503)                 # the next 2 requests answer 503
    api.fail_next(1, 409, method="PUT")   # the next PUT answers 409
    api.close_next(1)                     # the next request: connection closed
    api.rotate_token("new")               # the file and what is accepted
    api.node_uid("node-a")                # the Node's uid (every name is a Node)
    api.recreate_node("node-a")           # deleted and made again: a new uid
    api.remove_node("node-a")             # GET answers 404 from now on
    api.slices["node-a-gpuslice.io"]      # what was published
    api.log                               # [(method, path, status), ...]
    api.recorded()                        # the files of bodies, in order
    api.stop()

As a program (other languages' tests): python3 apiserver.py DIRECTORY
starts it and writes DIRECTORY/url once it listens; claims are then read
from DIRECTORY/claims/NAMESPACE/NAME.json at each request, and it runs
until DIRECTORY/stop exists or it is killed."""
import itertools
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

RESOURCE_API = "/apis/resource.k8s.io/v1"
CLAIM_PATH = re.compile(r"^" + RESOURCE_API + r"/namespaces/([^/]+)/resourceclaims/([^/]+)$")
SLICES_PATH = RESOURCE_API + "/resourceslices"
SLICE_PATH = re.compile(r"^" + SLICES_PATH + r"/([^/]+)$")
NODE_PATH = re.compile(r"^/api/v1/nodes/([^/]+)$")
DECIMAL_SUFFIXES = ["", "k", "M", "G", "T", "P", "E"]


def make_certificate(directory):
    """A self-signed certificate for 127.0.0.1, ::1 and localhost, its own
    CA: (certificate file, key file)."""
    cert, key = os.path.join(directory, "ca.crt"), os.path.join(directory, "server.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=gpuslice-test-apiserver",
                    "-addext", "subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost"],
                   check=True, capture_output=True)
    return cert, key


def canonical_quantity(text):
    """What the API server writes back for a quantity sent as a plain
    decimal integer: its canonical form with the largest decimal suffix
    that keeps it whole ("3000000000" is "3G", "100" stays "100")."""
    if not isinstance(text, str) or not re.fullmatch(r"[0-9]+", text) or int(text) == 0:
        return text
    value, suffix = int(text), 0
    while value % 1000 == 0 and suffix < len(DECIMAL_SUFFIXES) - 1:
        value, suffix = value // 1000, suffix + 1
    return str(value) + DECIMAL_SUFFIXES[suffix]


def canonical_slice(obj):
    for device in obj.get("spec", {}).get("devices", []) or []:
        for capacity in (device.get("capacity") or {}).values():
            capacity["value"] = canonical_quantity(capacity.get("value"))
            policy = capacity.get("requestPolicy") or {}
            if "default" in policy:
                policy["default"] = canonical_quantity(policy["default"])
            for key in ("min", "max", "step"):
                if key in (policy.get("validRange") or {}):
                    policy["validRange"][key] = canonical_quantity(policy["validRange"][key])
            if "validValues" in policy:
                policy["validValues"] = [canonical_quantity(v) for v in policy["validValues"]]
    return obj


def status_body(code, reason, message):
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


class _TLSServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def finish_request(self, request, client_address):
        # The TLS handshake in the connection's own thread: a client that
        # never completes one holds up nobody else.
        try:
            request.settimeout(30)
            tls = self.context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return
        try:
            self.RequestHandlerClass(tls, client_address, self)
        finally:
            try:
                tls.close()
            except OSError:
                pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):
        pass

    def do_GET(self):
        self.server.api._handle(self, "GET")

    def do_POST(self):
        self.server.api._handle(self, "POST")

    def do_PUT(self):
        self.server.api._handle(self, "PUT")

    def do_DELETE(self):
        self.server.api._handle(self, "DELETE")


class ApiServer:
    def __init__(self, directory, token="token-1", claims_dir=None):
        self.dir = directory
        os.makedirs(directory, exist_ok=True)
        self.ca_file, self.key_file = make_certificate(directory)
        self.token_file = os.path.join(directory, "token")
        self.record_dir = os.path.join(directory, "bodies")
        os.makedirs(self.record_dir, exist_ok=True)
        # Claims from files (DIR/NAMESPACE/NAME.json) as well as set_claim.
        self.claims_dir = claims_dir
        self.claims = {}
        self.slices = {}
        # Nodes: name -> uid for those made again, None for those removed;
        # any other name is a Node whose uid derives from its name.
        self.nodes = {}
        self.log = []
        self.lock = threading.Lock()
        self._failures = []
        self._sequence = itertools.count(1)
        self._resource_version = itertools.count(100)
        self.rotate_token(token)
        self.httpd = None

    # ---- control ---------------------------------------------------------------
    def start(self):
        self.httpd = _TLSServer(("127.0.0.1", 0), _Handler)
        self.httpd.api = self
        self.httpd.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.httpd.context.load_cert_chain(self.ca_file, self.key_file)
        self.port = self.httpd.server_address[1]
        self.url = "https://127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self):
        if self.httpd:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.httpd = None

    def env(self):
        return {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(self.port)}

    def rotate_token(self, token):
        """A new token: written to the token file (replaced whole, as the
        kubelet does) and the only one accepted from now on."""
        tmp = self.token_file + ".new"
        with open(tmp, "w") as f:
            f.write(token + "\n")
        os.replace(tmp, self.token_file)
        with self.lock:
            self.token = token

    def accept_token(self, token):
        """Accept another token without rewriting the file (to show a
        client that keeps an old one is refused)."""
        with self.lock:
            self.token = token

    def set_claim(self, claim):
        with self.lock:
            self.claims[(claim["metadata"]["namespace"], claim["metadata"]["name"])] = claim

    def node_uid(self, name):
        with self.lock:
            if name in self.nodes:
                return self.nodes[name]
        return str(uuid.uuid5(uuid.NAMESPACE_URL, "node/" + name))

    def recreate_node(self, name):
        with self.lock:
            self.nodes[name] = str(uuid.uuid4())

    def remove_node(self, name):
        with self.lock:
            self.nodes[name] = None

    def delete_claim(self, namespace, name):
        with self.lock:
            self.claims.pop((namespace, name), None)

    def fail_next(self, count, status=503, method=None):
        """The next count requests (of method, or any) answer status."""
        with self.lock:
            self._failures += [("status", status, method)] * count

    def close_next(self, count, method=None):
        """The next count requests (of method, or any) get their connection
        closed without an answer."""
        with self.lock:
            self._failures += [("close", None, method)] * count

    def clear_failures(self):
        with self.lock:
            self._failures = []

    def requests(self, method=None, path_prefix=""):
        with self.lock:
            return [entry for entry in self.log
                    if (method is None or entry[0] == method) and entry[1].startswith(path_prefix)]

    def recorded(self):
        return sorted(os.path.join(self.record_dir, f) for f in os.listdir(self.record_dir))

    # ---- serving ------------------------------------------------------------------
    def _record(self, what, obj_or_text):
        name = "%04d-%s.json" % (next(self._sequence), re.sub(r"[^A-Za-z0-9_.-]", "_", what))
        with open(os.path.join(self.record_dir, name), "w") as f:
            f.write(obj_or_text if isinstance(obj_or_text, str) else json.dumps(obj_or_text, indent=1))

    def _answer(self, handler, method, path, code, obj):
        # Logged before the answer goes: a client that has its answer finds
        # its request in the log.
        with self.lock:
            self.log.append((method, path, code))
        data = json.dumps(obj).encode()
        handler.send_response(code)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _failure(self, method):
        with self.lock:
            for i, failure in enumerate(self._failures):
                if failure[2] is None or failure[2] == method:
                    return self._failures.pop(i)
        return None

    def _claim(self, namespace, name):
        with self.lock:
            claim = self.claims.get((namespace, name))
        if claim is None and self.claims_dir:
            path = os.path.join(self.claims_dir, namespace, name + ".json")
            if re.fullmatch(r"[a-z0-9.-]+", namespace + name) and os.path.exists(path):
                with open(path) as f:
                    claim = json.load(f)
        return claim

    def _handle(self, handler, method):
        path = handler.path.split("?", 1)[0]
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        failure = self._failure(method)
        if failure and failure[0] == "close":
            with self.lock:
                self.log.append((method, path, "closed"))
            handler.close_connection = True
            try:
                handler.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        if failure:
            return self._answer(handler, method, path, failure[1],
                                status_body(failure[1], "ServiceUnavailable" if failure[1] >= 500 else "Conflict",
                                            "injected failure %d" % failure[1]))
        if handler.headers.get("Authorization") != "Bearer " + self.token:
            return self._answer(handler, method, path, 401, status_body(401, "Unauthorized", "Unauthorized"))
        if body:
            self._record("received-%s-%s" % (method, path.rsplit("/", 1)[-1]), body.decode("utf-8", "replace"))

        m = CLAIM_PATH.match(path)
        if m and method == "GET":
            claim = self._claim(m.group(1), m.group(2))
            if claim is None:
                return self._answer(handler, method, path, 404, status_body(
                    404, "NotFound", 'resourceclaims.resource.k8s.io "%s" not found' % m.group(2)))
            self._record("served-claim-%s-%s" % m.groups(), claim)
            return self._answer(handler, method, path, 200, claim)
        m = NODE_PATH.match(path)
        if m and method == "GET":
            uid = self.node_uid(m.group(1))
            if uid is None:
                return self._answer(handler, method, path, 404, status_body(
                    404, "NotFound", 'nodes "%s" not found' % m.group(1)))
            return self._answer(handler, method, path, 200, {
                "apiVersion": "v1", "kind": "Node", "metadata": {"name": m.group(1), "uid": uid,
                                                                 "resourceVersion": "1"}})
        if path == SLICES_PATH and method == "GET":
            with self.lock:
                items = list(self.slices.values())
            return self._answer(handler, method, path, 200, {"apiVersion": "resource.k8s.io/v1",
                                                             "kind": "ResourceSliceList", "metadata": {},
                                                             "items": items})
        if path == SLICES_PATH and method == "POST":
            return self._create_slice(handler, method, path, body)
        m = SLICE_PATH.match(path)
        if m and method in ("GET", "PUT", "DELETE"):
            name = m.group(1)
            if method == "PUT":
                return self._replace_slice(handler, method, path, name, body)
            with self.lock:
                obj = self.slices.get(name) if method == "GET" else self.slices.pop(name, None)
            if obj is None:
                return self._answer(handler, method, path, 404, status_body(
                    404, "NotFound", 'resourceslices.resource.k8s.io "%s" not found' % name))
            return self._answer(handler, method, path, 200, obj)
        return self._answer(handler, method, path, 404, status_body(404, "NotFound", "the server could not find "
                                                                                        "the requested resource"))

    def _parse_slice(self, handler, method, path, body):
        try:
            obj = json.loads(body)
        except ValueError as e:
            self._answer(handler, method, path, 400, status_body(400, "BadRequest", "not JSON: %s" % e))
            return None
        if not isinstance(obj, dict) or obj.get("apiVersion") != "resource.k8s.io/v1" or \
                obj.get("kind") != "ResourceSlice" or not isinstance(obj.get("metadata"), dict) or \
                not obj["metadata"].get("name"):
            self._answer(handler, method, path, 400, status_body(400, "BadRequest", "not a named "
                                                                 "resource.k8s.io/v1 ResourceSlice"))
            return None
        return obj

    def _create_slice(self, handler, method, path, body):
        obj = self._parse_slice(handler, method, path, body)
        if obj is None:
            return None
        name = obj["metadata"]["name"]
        with self.lock:
            if name in self.slices:
                conflict = True
            else:
                conflict = False
                obj["metadata"].update({"uid": str(uuid.uuid4()), "resourceVersion": str(next(self._resource_version)),
                                        "generation": 1,
                                        "creationTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
                self.slices[name] = canonical_slice(obj)
        if conflict:
            return self._answer(handler, method, path, 409, status_body(
                409, "AlreadyExists", 'resourceslices.resource.k8s.io "%s" already exists' % name))
        return self._answer(handler, method, path, 201, obj)

    def _replace_slice(self, handler, method, path, name, body):
        obj = self._parse_slice(handler, method, path, body)
        if obj is None:
            return None
        with self.lock:
            current = self.slices.get(name)
            version = obj["metadata"].get("resourceVersion")
            if current is None:
                code, reason, message = 404, "NotFound", 'resourceslices.resource.k8s.io "%s" not found' % name
            elif obj["metadata"]["name"] != name:
                code, reason, message = 400, "BadRequest", "the name of the object does not match the path"
            elif not version:
                code, reason, message = 422, "Invalid", "metadata.resourceVersion: must be specified for an update"
            elif version != current["metadata"]["resourceVersion"]:
                code, reason, message = 409, "Conflict", (
                    'Operation cannot be fulfilled on resourceslices.resource.k8s.io "%s": the object has been '
                    "modified; please apply your changes to the latest version and try again" % name)
            else:
                code = 200
                obj["metadata"].update({k: current["metadata"][k] for k in ("uid", "creationTimestamp")})
                obj["metadata"]["resourceVersion"] = str(next(self._resource_version))
                obj["metadata"]["generation"] = current["metadata"].get("generation", 1) + 1
                self.slices[name] = canonical_slice(obj)
        if code != 200:
            return self._answer(handler, method, path, code, status_body(code, reason, message))
        return self._answer(handler, method, path, 200, obj)


def main():
    directory = sys.argv[1]
    api = ApiServer(directory, claims_dir=os.path.join(directory, "claims")).start()
    with open(os.path.join(directory, "url.new"), "w") as f:
        f.write(api.url + "\n")
    os.replace(os.path.join(directory, "url.new"), os.path.join(directory, "url"))
    try:
        while not os.path.exists(os.path.join(directory, "stop")):
            time.sleep(0.1)
    finally:
        api.stop()


if __name__ == "__main__":
    main()
