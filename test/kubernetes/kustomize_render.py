"""Renders a kustomization directory as kustomize does, for the part of
kustomize that deploy/kubernetes uses, and refuses everything else (a field
it does not know is an error, never ignored), so that a manifest cannot
lean on a feature this renderer would get wrong.

What it implements:
  Kustomization (kustomize.config.k8s.io/v1beta1): resources (files and
    kustomization directories), components, patches, images.
  Component (kustomize.config.k8s.io/v1alpha1): resources, patches.
  patches: JSON 6902 only (RFC 6902 operations, applied with python3-jsonpatch),
    inline (patch:) or from a file (path:), with a target of group, version,
    kind, name and namespace. A target that matches nothing changes nothing,
    as in kustomize; Render.matches counts what each patch matched.
  images: name, newName, newTag, for the containers and init containers of
    pod templates and pods.
Order, as kustomize's: a kustomization's resources (a directory rendered
first, with its own transformers), then each component in turn (its
resources, then its patches, over everything accumulated), then its own
patches, then its images.
Load restrictions: as kustomize's default (LoadRestrictionsRootOnly), a file
must lie in or below the kustomization's directory; directories (other
kustomizations and components) may lie anywhere. root_only=False is
kustomize's --load-restrictor LoadRestrictionsNone.

    r = Render(root_only=True)
    objects = r.render("deploy/kubernetes/overlays/eks-al2023")
    r.loaded     # every file read
    r.matches    # {(kustomization file, patch index): objects matched}
"""
import copy
import os

import jsonpatch
import yaml

KUSTOMIZATION = ("kustomize.config.k8s.io/v1beta1", "Kustomization")
COMPONENT = ("kustomize.config.k8s.io/v1alpha1", "Component")
FIELDS = {
    KUSTOMIZATION: {"apiVersion", "kind", "resources", "components", "patches", "images"},
    COMPONENT: {"apiVersion", "kind", "resources", "patches"},
}
TARGET_FIELDS = {"group", "version", "kind", "name", "namespace"}
PATCH_FIELDS = {"target", "patch", "path"}
IMAGE_FIELDS = {"name", "newName", "newTag"}


class RenderError(Exception):
    pass


def _under(path, root):
    path, root = os.path.realpath(path), os.path.realpath(root)
    return path == root or path.startswith(root + os.sep)


def _gv(api_version):
    group, _, version = api_version.rpartition("/")
    return group, version


def _matches(obj, target):
    group, version = _gv(obj.get("apiVersion", ""))
    meta = obj.get("metadata") or {}
    want = {"group": group, "version": version, "kind": obj.get("kind"),
            "name": meta.get("name"), "namespace": meta.get("namespace")}
    return all(want[k] == v for k, v in target.items())


def _set_image(container, images):
    name, sep, tag = container.get("image", "").rpartition(":")
    if not sep or "/" in tag:  # no tag ("registry:5000/x" has a port, not a tag)
        name, tag = container.get("image", ""), None
    for image in images:
        if image["name"] == name:
            new = image.get("newName", name)
            new_tag = image.get("newTag", tag)
            container["image"] = new + (":" + new_tag if new_tag else "")


def _pod_specs(obj):
    if obj.get("kind") == "Pod":
        return [obj.get("spec") or {}]
    template = (obj.get("spec") or {}).get("template")
    if template:
        return [template.get("spec") or {}]
    job = ((obj.get("spec") or {}).get("jobTemplate") or {}).get("spec", {}).get("template")
    return [job.get("spec") or {}] if job else []


class Render:
    def __init__(self, root_only=True):
        self.root_only = root_only
        self.loaded = set()
        self.matches = {}

    def _read(self, path):
        self.loaded.add(os.path.realpath(path))
        with open(path) as f:
            return f.read()

    def _kustomization(self, directory, kinds):
        path = os.path.join(directory, "kustomization.yaml")
        if not os.path.isfile(path):
            raise RenderError("%s: no kustomization.yaml" % directory)
        k = yaml.safe_load(self._read(path))
        key = (k.get("apiVersion"), k.get("kind"))
        if key not in kinds:
            raise RenderError("%s: %s %s where %s was expected" % (path, key[0], key[1],
                                                                   " or ".join(x[1] for x in kinds)))
        unknown = set(k) - FIELDS[key]
        if unknown:
            raise RenderError("%s: fields this renderer does not implement: %s" % (path, sorted(unknown)))
        return path, key, k

    def _resources(self, directory, entries, path):
        objects = []
        for entry in entries or []:
            p = os.path.normpath(os.path.join(directory, entry))
            if os.path.isdir(p):
                objects += self.render(p)
            elif os.path.isfile(p):
                if self.root_only and not _under(p, directory):
                    raise RenderError("%s: %s is not in or below %s (kustomize's root-only load "
                                      "restriction)" % (path, entry, directory))
                objects += [d for d in yaml.safe_load_all(self._read(p)) if d]
            else:
                raise RenderError("%s: resource %s does not exist" % (path, entry))
        return objects

    def _patch(self, directory, path, index, spec, objects):
        unknown = set(spec) - PATCH_FIELDS
        if unknown:
            raise RenderError("%s: patch %d: fields this renderer does not implement: %s"
                              % (path, index, sorted(unknown)))
        target = spec.get("target")
        if not isinstance(target, dict) or not target or set(target) - TARGET_FIELDS:
            raise RenderError("%s: patch %d: a target of %s is required (strategic merge patches are not "
                              "implemented)" % (path, index, ", ".join(sorted(TARGET_FIELDS))))
        if ("patch" in spec) == ("path" in spec):
            raise RenderError("%s: patch %d: one of patch and path" % (path, index))
        if "path" in spec:
            p = os.path.normpath(os.path.join(directory, spec["path"]))
            if self.root_only and not _under(p, directory):
                raise RenderError("%s: patch %d: %s is outside %s" % (path, index, spec["path"], directory))
            text = self._read(p)
        else:
            text = spec["patch"]
        ops = yaml.safe_load(text)
        if not isinstance(ops, list) or not all(isinstance(o, dict) and "op" in o for o in ops):
            raise RenderError("%s: patch %d is not a list of JSON 6902 operations" % (path, index))
        patch = jsonpatch.JsonPatch(ops)
        hits = 0
        for i, obj in enumerate(objects):
            if _matches(obj, target):
                try:
                    objects[i] = patch.apply(obj)
                except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
                    raise RenderError("%s: patch %d on %s %s: %s" % (path, index, obj.get("kind"),
                                                                      obj["metadata"].get("name"), e))
                hits += 1
        key = (os.path.realpath(path), index)
        self.matches[key] = self.matches.get(key, 0) + hits

    def _transform(self, directory, path, k, objects):
        for index, spec in enumerate(k.get("patches") or []):
            self._patch(directory, path, index, spec, objects)

    def render(self, directory, kinds=(KUSTOMIZATION,)):
        """The objects of the kustomization in directory, rendered."""
        path, key, k = self._kustomization(directory, kinds)
        objects = self._resources(directory, k.get("resources"), path)
        for entry in k.get("components") or []:
            cdir = os.path.normpath(os.path.join(directory, entry))
            cpath, _, c = self._kustomization(cdir, (COMPONENT,))
            objects += self._resources(cdir, c.get("resources"), cpath)
            self._transform(cdir, cpath, c, objects)
        self._transform(directory, path, k, objects)
        images = k.get("images") or []
        for image in images:
            if set(image) - IMAGE_FIELDS or "name" not in image:
                raise RenderError("%s: images: only %s are implemented" % (path, ", ".join(sorted(IMAGE_FIELDS))))
        for obj in objects:
            for spec in _pod_specs(obj):
                for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
                    _set_image(c, images)
        return [copy.deepcopy(o) for o in objects]
