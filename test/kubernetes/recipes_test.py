"""The node-family recipes of deploy/kubernetes: the base, each kustomize
component (components/al2023, al2, bottlerocket) and each overlay
(overlays/eks-*), rendered as kustomize renders them (kustomize_render.py,
RFC 6902 patches applied with python3-jsonpatch), every rendered object
validated against the Kubernetes OpenAPI schemas (render_validate.mjs, npm
kubernetes-models, as manifests_test.py does), and the family-specific
values asserted in the rendered DaemonSets: host paths, the shim's path, the
server's mounts, SELinux types, the node affinity that selects GPU nodes
without GPU feature discovery. Every file under components/ and overlays/
must be read by some render, and every patch must change something in one.
Negative controls: a patch whose test op or path is wrong, an
unimplemented field, a file outside the root and a broken rendered object
are all refused."""
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile

from testlib import BUILD, Checks, skip

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
DEPLOY = os.path.join(SOURCE, "deploy", "kubernetes")

# Debian's python3-jsonpatch and python3-yaml (scripts/lib.sh installs
# them) are pure Python: a python3 other than Debian's reads them from its
# dist-packages.
try:
    import jsonpatch  # noqa: F401
    import yaml  # noqa: F401
except ImportError:
    sys.path.append("/usr/lib/python3/dist-packages")
try:
    import jsonpatch  # noqa: F401,F811
    import yaml  # noqa: F401,F811
except ImportError as e:
    skip("python3-jsonpatch and python3-yaml are needed to render the kustomize recipes (%s)" % e)

import k8s_npm  # noqa: E402
import kustomize_render as kr  # noqa: E402

checks = Checks()
expect = checks.expect

# The OR'ed node selector terms that select GPU nodes without GPU feature
# discovery, next to its own label.
GPU_TERMS = [
    ("nvidia.com/gpu.present", "true"),
    ("feature.node.kubernetes.io/pci-10de.present", "true"),
    ("gpuslice.io/gpu", "true"),
    ("karpenter.k8s.aws/instance-gpu-manufacturer", "nvidia"),
    ("eks.amazonaws.com/instance-gpu-manufacturer", "nvidia"),
]
BR_INSTALL = "/var/lib/gpuslice/install"
SUPER_T = {"user": "system_u", "role": "system_r", "type": "super_t", "level": "s0"}


def terms(spec):
    """The node affinity's terms as [(key, value)], or None if any term is
    not one In expression of one value."""
    try:
        out = []
        for t in spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]:
            (e,) = t["matchExpressions"]
            if e["operator"] != "In" or len(e["values"]) != 1 or set(t) != {"matchExpressions"}:
                return None
            out.append((e["key"], e["values"][0]))
        return out
    except (KeyError, TypeError, ValueError):
        return None


def find(objects, kind, name):
    return next((o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name), None)


def host_of(spec, container, mount_path):
    """The host path behind a container's mount, or None."""
    m = next((m for m in container.get("volumeMounts", []) if m["mountPath"] == mount_path), None)
    v = m and next((v for v in spec["volumes"] if v["name"] == m["name"]), None)
    return v and v.get("hostPath", {}).get("path")


def container(spec, name, init=False):
    return next(c for c in spec["initContainers" if init else "containers"] if c["name"] == name)


def check_common(label, ds, un=None):
    spec = ds["spec"]["template"]["spec"]
    expect(terms(spec) == GPU_TERMS and "nodeSelector" not in spec,
           "%s: the server's node affinity ORs %s, and no nodeSelector" % (label, ", ".join(k for k, _ in GPU_TERMS)))
    expect({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec.get("tolerations", []),
           "%s: the server tolerates the nvidia.com/gpu taint" % label)
    if un is not None:
        us = un["spec"]["template"]["spec"]
        expect(us.get("affinity") == spec["affinity"] and us.get("tolerations") == spec["tolerations"],
               "%s: the uninstall DaemonSet selects the server's nodes (the same affinity and toleration)" % label)


def check_base_paths(label, ds):
    spec = ds["spec"]["template"]["spec"]
    server = container(spec, "server")
    install = container(spec, "install", init=True)
    expect(host_of(spec, install, "/host/opt/gpuslice") == "/opt/gpuslice" and
           "--shim=/opt/gpuslice/lib/libgpuslice.so" in server["command"] and
           host_of(spec, server, "/var/run/cdi") == "/var/run/cdi" and
           host_of(spec, server, "/run/gpuslice") == "/run/gpuslice",
           "%s: the shim is installed to and named at /opt/gpuslice; CDI in /var/run/cdi, run dir /run/gpuslice" % label)
    expect(all("seLinuxOptions" not in (c.get("securityContext") or {})
               for c in spec["containers"] + spec["initContainers"]),
           "%s: no SELinux options (the runtime's default type)" % label)


def family(ds):
    return (ds["spec"]["template"]["metadata"].get("annotations") or {}).get("gpuslice.io/node-family")


def check_bottlerocket(label, ds, un=None):
    spec = ds["spec"]["template"]["spec"]
    server = container(spec, "server")
    install = container(spec, "install", init=True)
    dra = container(spec, "dra")
    expect(host_of(spec, install, "/host/opt/gpuslice") == BR_INSTALL,
           "%s: the init container installs the shim and hook into the host's %s" % (label, BR_INSTALL))
    expect("--shim=%s/lib/libgpuslice.so" % BR_INSTALL in server["command"] and
           not any("/opt/gpuslice" in a for a in server["command"]),
           "%s: the server names the shim at the host's %s/lib/libgpuslice.so (containers get it there)"
           % (label, BR_INSTALL))
    m = next((m for m in server["volumeMounts"] if m["mountPath"] == BR_INSTALL), {})
    expect(host_of(spec, server, BR_INSTALL) == BR_INSTALL and m.get("readOnly") is True,
           "%s: the server mounts %s read-only at the same path, so its shim check sees the host's copy"
           % (label, BR_INSTALL))
    expect(all((c.get("securityContext") or {}).get("seLinuxOptions") == SUPER_T for c in (install, server, dra)),
           "%s: install, server and dra run as SELinux type super_t" % label)
    paths = [v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v]
    expect(all(p.startswith(("/var/", "/run/")) for p in paths),
           "%s: every hostPath lies in /var or /run, which are writable on Bottlerocket (%s)" % (label, paths))
    expect(host_of(spec, server, "/var/run/cdi") == "/var/run/cdi" and
           host_of(spec, dra, "/var/lib/kubelet/plugins") == "/var/lib/kubelet/plugins" and
           host_of(spec, server, "/var/log/containers") == "/var/log/containers",
           "%s: the CDI directory and the kubelet's directories are the base's" % label)
    expect(family(ds) == "bottlerocket", "%s: the pods are annotated gpuslice.io/node-family=bottlerocket" % label)
    if un is not None:
        us = un["spec"]["template"]["spec"]
        c = container(us, "uninstall", init=True)
        flag = next(a for a in c["command"] if a.startswith("--install-dir="))
        expect(host_of(us, c, flag.split("=", 1)[1]) == BR_INSTALL and
               (c.get("securityContext") or {}).get("seLinuxOptions") == SUPER_T,
               "%s: the uninstall removes what was installed in %s, as super_t" % (label, BR_INSTALL))


# ---- the renders -------------------------------------------------------------
renders = {}   # label -> objects
loaded = set()
matches = {}


def render(label, directory, root_only=True):
    r = kr.Render(root_only=root_only)
    try:
        renders[label] = r.render(directory)
    except kr.RenderError as e:
        expect(False, "%s renders (%s)" % (label, e))
        return None
    expect(True, "%s renders: %d objects" % (label, len(renders[label])))
    loaded.update(r.loaded)
    for k, n in r.matches.items():
        matches[k] = matches.get(k, 0) + n
    return renders[label]


base = render("base", DEPLOY)
if base:
    ds = find(base, "DaemonSet", "gpuslice-server")
    check_common("base", ds)
    check_base_paths("base", ds)
    expect(find(base, "NetworkPolicy", "gpuslice-metrics") is not None,
           "base: kustomization.yaml applies the NetworkPolicy gpuslice-metrics (networkpolicy.yaml)")
    expect(ds["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example.com/gpuslice:0.1.0",
           "base: the images: entry is applied")

# uninstall.yaml on its own (applied with kubectl apply -f).
with open(os.path.join(DEPLOY, "uninstall.yaml")) as f:
    uninstall = yaml.safe_load(f)
if base:
    check_common("uninstall.yaml", find(base, "DaemonSet", "gpuslice-server"), uninstall)

# Each component, on the base and on the base with uninstall.yaml (a
# kustomization written to a scratch directory, as an operator's own
# overlay would be; root-only is off there, for ../uninstall.yaml).
COMPONENTS = sorted(d for d in os.listdir(os.path.join(DEPLOY, "components"))
                    if os.path.isdir(os.path.join(DEPLOY, "components", d)))
expect(COMPONENTS == ["al2", "al2023", "bottlerocket"], "components/: al2, al2023, bottlerocket (%s)" % COMPONENTS)
scratch = tempfile.mkdtemp(prefix="gpuslice-recipes-")
try:
    for name in COMPONENTS:
        d = os.path.join(scratch, name)
        os.makedirs(d)
        with open(os.path.join(d, "kustomization.yaml"), "w") as f:
            yaml.safe_dump({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                            "resources": [DEPLOY, os.path.join(DEPLOY, "uninstall.yaml")],
                            "components": [os.path.join(DEPLOY, "components", name)]}, f)
        objs = render("component %s (base and uninstall.yaml)" % name, d, root_only=False)
        if not objs:
            continue
        ds, un = find(objs, "DaemonSet", "gpuslice-server"), find(objs, "DaemonSet", "gpuslice-uninstall")
        check_common("component " + name, ds, un)
        if name == "bottlerocket":
            check_bottlerocket("component " + name, ds, un)
        else:
            check_base_paths("component " + name, ds)
            expect(family(ds) == name, "component %s: the pods are annotated gpuslice.io/node-family=%s" % (name, name))
            expect(un == uninstall, "component %s: uninstall.yaml needs no change" % name)
finally:
    shutil.rmtree(scratch)

# The overlays, as an operator applies them.
OVERLAYS = sorted(os.listdir(os.path.join(DEPLOY, "overlays")))
expect(OVERLAYS == ["eks-al2", "eks-al2023", "eks-bottlerocket", "eks-bottlerocket-uninstall"],
       "overlays/: eks-al2, eks-al2023, eks-bottlerocket, eks-bottlerocket-uninstall (%s)" % OVERLAYS)
for name in OVERLAYS:
    d = os.path.join(DEPLOY, "overlays", name)
    if name.endswith("-uninstall"):
        try:
            kr.Render().render(d)
            expect(False, "overlay %s is refused under kustomize's default load restriction" % name)
        except kr.RenderError as e:
            expect("root-only" in str(e), "overlay %s needs --load-restrictor LoadRestrictionsNone (%s)" % (name, e))
        objs = render("overlay " + name, d, root_only=False)
        if objs:
            un = find(objs, "DaemonSet", "gpuslice-uninstall")
            expect(len(objs) == 1 and un is not None, "overlay %s: the uninstall DaemonSet alone" % name)
            server = find(renders.get("overlay eks-bottlerocket", []), "DaemonSet", "gpuslice-server")
            if un and server:
                check_common("overlay " + name, server, un)
                check_bottlerocket("overlay " + name, server, un)
        continue
    objs = render("overlay " + name, d)
    if not objs:
        continue
    ds = find(objs, "DaemonSet", "gpuslice-server")
    fam = name[len("eks-"):]
    check_common("overlay " + name, ds)
    expect(family(ds) == fam, "overlay %s: the %s component is applied" % (name, fam))
    if fam == "bottlerocket":
        check_bottlerocket("overlay " + name, ds)
    else:
        check_base_paths("overlay " + name, ds)
    expect([(o["kind"], o["metadata"]["name"]) for o in objs] == [(o["kind"], o["metadata"]["name"]) for o in base],
           "overlay %s: the base's objects, no more, no fewer" % name)

# Nothing under components/ or overlays/ goes untested.
files = set()
for sub in ("components", "overlays"):
    for root, _, names in os.walk(os.path.join(DEPLOY, sub)):
        files.update(os.path.realpath(os.path.join(root, n)) for n in names)
unread = sorted(os.path.relpath(f, DEPLOY) for f in files - loaded)
expect(files and not unread, "every file under components/ and overlays/ is read by a render (%d files; unread: %s)"
       % (len(files), unread))
idle = sorted("%s patch %d" % (os.path.relpath(k[0], DEPLOY), k[1]) for k, n in matches.items() if n == 0)
expect(matches and not idle, "every patch of a component changes an object in some render (%d; idle: %s)"
       % (len(matches), idle))

# ---- negative controls: the renderer refuses what kustomize would -----------
def refused(what, kustomization, files=None, expect_in=""):
    d = tempfile.mkdtemp(prefix="gpuslice-recipes-")
    try:
        for rel, text in (files or {}).items():
            os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w") as f:
                f.write(text)
        with open(os.path.join(d, "kustomization.yaml"), "w") as f:
            yaml.safe_dump(kustomization, f)
        try:
            kr.Render(root_only=True).render(d)
            expect(False, "negative control: %s is refused (it rendered)" % what)
        except kr.RenderError as e:
            expect(expect_in in str(e), "negative control: %s is refused (%s)" % (what, e))
    finally:
        shutil.rmtree(d)


def component_with(patch_text, target=None):
    return {"c/kustomization.yaml": yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1alpha1", "kind": "Component",
        "patches": [{"target": target or {"group": "apps", "version": "v1", "kind": "DaemonSet",
                                          "name": "gpuslice-server"}, "patch": patch_text}]})}


def over_base(extra=None):
    k = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
         "resources": [DEPLOY], "components": ["c"]}
    k.update(extra or {})
    return k


br_text = yaml.safe_load(open(os.path.join(DEPLOY, "components", "bottlerocket", "kustomization.yaml")))
br_patch = br_text["patches"][0]["patch"]
refused("the bottlerocket patch with its --shim argument moved (a test op guards the index)", over_base(),
        component_with(br_patch.replace("--shim=/opt/gpuslice/lib/libgpuslice.so", "--shim=/opt/elsewhere.so")),
        "test")
refused("a replace at a path that does not exist", over_base(),
        component_with("- {op: replace, path: /spec/template/spec/volumes/99/hostPath/path, value: /x}\n"), "patch 0")
refused("an al2023 component whose install-dir test names another path", over_base(),
        component_with(open(os.path.join(DEPLOY, "components", "al2023", "kustomization.yaml")).read()
                       .split("patch: |-\n", 1)[1].replace("      ", "").replace("path: /opt/gpuslice", "path: /opt/x")),
        "test")
refused("a strategic merge patch (not implemented)", over_base(),
        {"c/kustomization.yaml": yaml.safe_dump({"apiVersion": "kustomize.config.k8s.io/v1alpha1", "kind": "Component",
                                                 "patches": [{"patch": "kind: DaemonSet\n"}]})}, "target")
refused("a kustomization field the renderer does not implement (namePrefix)", over_base({"namePrefix": "x-"}),
        component_with("[]"), "namePrefix")
refused("a resource file outside the kustomization's directory", {
    "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
    "resources": [os.path.join(DEPLOY, "uninstall.yaml")]}, None, "root-only")
refused("a component named as a resource's kind (a Kustomization in components:)", over_base(),
        {"c/kustomization.yaml": yaml.safe_dump({"apiVersion": "kustomize.config.k8s.io/v1beta1",
                                                 "kind": "Kustomization"})}, "Component")

# ---- schema validation of every rendered object -------------------------------
why_not = k8s_npm.install()
if why_not:
    if checks.failed:
        checks.finish()
    skip("the renders are checked, but not against the schemas: " + why_not)
entries = [{"label": label, "obj": o, "valid": True} for label, objs in sorted(renders.items()) for o in objs]
# Negative controls: what the schema check must refuse, from a real render.
if base:
    bad = copy.deepcopy(find(renders.get("overlay eks-bottlerocket", base), "DaemonSet", "gpuslice-server"))
    bad["spec"]["template"]["spec"]["volumes"][3]["hostPth"] = bad["spec"]["template"]["spec"]["volumes"][3].pop("hostPath")
    entries.append({"label": "negative control: a misspelt hostPath", "obj": bad, "valid": False})
    bad = copy.deepcopy(find(base, "DaemonSet", "gpuslice-server"))
    bad["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = [
        {"key": "gpuslice.io/gpu"}]
    entries.append({"label": "negative control: node affinity terms not in nodeSelectorTerms", "obj": bad, "valid": False})
out = os.path.join(BUILD, "test", "kubernetes", "recipes-rendered.json")
os.makedirs(os.path.dirname(out), exist_ok=True)
with open(out, "w") as f:
    json.dump(entries, f)
p = subprocess.run(["node", os.path.join(HERE, "render_validate.mjs"), out, k8s_npm.NPM_DIR],
                   capture_output=True, text=True)
sys.stdout.write(p.stdout)
sys.stdout.write(p.stderr)
expect(p.returncode == 0, "every rendered object is valid, and the broken ones are refused (%d objects)" % len(entries))
checks.finish()
