"""The image provisioner: an image reference (Docker or OCI, from a
Docker/OCI registry) in; its unpacked layers, ready to be a container's
root filesystem, and its config out (docs/containers.rst, "Images").

Modules, pure ones first:

- :mod:`.reference` — references parsed as Docker parses them;
- :mod:`.manifest` — manifests, indexes, this machine's platform;
- :mod:`.config` — the image config (Env, Entrypoint, Cmd, ...);
- :mod:`.cache` — the cache's bookkeeping and what to collect;
- :mod:`.credentials` — Docker ``config.json`` credentials;
- :mod:`.registry` — the registry client (HTTP);
- :mod:`.layers` — unpacking hostile layer tars safely;
- :mod:`.rootfs` — an overlay mount of the layers, or a flattened copy;
- :mod:`.store` — :class:`ImageStore`, which ties them together.

Standard library only, and relative imports only, so that a task's
supervisor (run as ``python -I -S supervisor.py``, no package on its path)
can load this package by its path, as it loads the fetcher, and pull an
image without the agent's loop waiting.
"""

from .config import ImageConfig, parse_config
from .errors import (BAD_IMAGE, BAD_NAME, CACHE, CREDENTIALS, DIGEST_MISMATCH, KINDS, NOT_FOUND, TOO_LARGE,
                     UNAUTHORIZED, UNREACHABLE, UNSUPPORTED, ImageError)
from .reference import ImageReference, parse_reference
from .rootfs import flatten, mount_overlay, overlay_options, unmount
from .store import DEFAULT_CACHE_SIZE, DEFAULT_REGISTRY, IMAGES_DIR, CachedImage, ImageLimits, ImageStore, \
    ProvisionedImage, parse_default_registry

__all__ = ["ImageStore", "ImageLimits", "ProvisionedImage", "CachedImage", "ImageConfig", "ImageReference",
           "ImageError", "parse_reference", "parse_config", "parse_default_registry", "flatten", "mount_overlay",
           "overlay_options", "unmount", "DEFAULT_CACHE_SIZE", "DEFAULT_REGISTRY", "IMAGES_DIR", "KINDS", "BAD_NAME",
           "NOT_FOUND", "UNAUTHORIZED", "UNREACHABLE", "DIGEST_MISMATCH", "TOO_LARGE", "BAD_IMAGE", "UNSUPPORTED",
           "CREDENTIALS", "CACHE", "load_by_path"]


def load_by_path():
    """This package loaded from its directory under a private name (what
    the supervisor does; see the module docstring), for checking that it
    works so: ``load_by_path().ImageStore``."""
    import importlib.util
    import os
    import sys
    directory = os.path.dirname(os.path.abspath(__file__))
    name = "mesoslike_supervisor_images"
    spec = importlib.util.spec_from_file_location(name, os.path.join(directory, "__init__.py"),
                                                  submodule_search_locations=[directory])
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {directory}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
