"""Import the engines' KV-event modules without their GPU stack.

Importing this module, before any vllm or sglang import, does two things:

1. Registers bare packages (vllm, vllm.distributed, vllm.utils, sglang,
   sglang.srt, ...) whose __path__ is the installed wheel directory. Their
   real __init__ files import the whole engine (torch, CUDA kernels, model
   code); skipping them lets the KV-event submodules, and what they import
   (vllm.logger, vllm.envs, vllm.utils.network_utils, sglang.srt.environ,
   sglang.srt.runtime_context, sglang.srt.utils.network, ...), load from the
   real, unmodified files.

2. Puts stand-ins into sys.modules for the few modules those submodules import
   that cannot load without torch, triton or a C++ build. Each stand-in holds
   only the names the KV-event code uses, and says what it replaces:

   vLLM
     vllm.config.utils           config -> dataclasses.dataclass (the real
                                 decorator is a pydantic dataclass factory that
                                 imports torch); KVEventsConfig itself is real
     vllm.v1.core.kv_cache_utils ExternalBlockHash = bytes | int, copied from
                                 the real module (which imports torch)
   SGLang
     sglang.kernels.ops.kvcache.mla_buffer   triton kernels, unused here
     sglang.srt.utils.cpp_extension_loader   builds the page-hash C++
                                 extension with torch.utils.cpp_extension; the
                                 stand-in imports the same source, the wheel's
                                 hash_binding.cpp, compiled with g++ by
                                 scripts/lib/pyenv.sh (the real native_hash.py
                                 and mem_cache/utils.py call it)
"""

import dataclasses
import importlib.metadata
import importlib.util
import os
import sys
import types


def _package_dir(dist, top):
    files = importlib.metadata.distribution(dist).locate_file(top)
    return str(files)


def _bare_package(name, path):
    mod = types.ModuleType(name)
    mod.__path__ = [path]
    mod.__package__ = name
    mod.__spec__ = importlib.util.spec_from_loader(name, loader=None, is_package=True)
    mod.__spec__.submodule_search_locations = [path]
    sys.modules[name] = mod
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, mod)
    return mod


def _stub(name, **attrs):
    mod = types.ModuleType(name)
    mod.__doc__ = "interop stand-in (tests/interop/testdata/stubs.py)"
    for k, v in attrs.items():
        setattr(mod, k, v)
    sys.modules[name] = mod
    parent, _, child = name.rpartition(".")
    if parent in sys.modules:
        setattr(sys.modules[parent], child, mod)
    return mod


def _unavailable(what):
    def f(*args, **kwargs):
        raise NotImplementedError(what + " is not available in the interop stand-in")

    return f


# --- vLLM -----------------------------------------------------------------
_vllm = _package_dir("vllm", "vllm")
for pkg in ("vllm", "vllm.config", "vllm.distributed", "vllm.utils", "vllm.v1", "vllm.v1.core"):
    _bare_package(pkg, os.path.join(_vllm, *pkg.split(".")[1:]))

_stub("vllm.config.utils", config=dataclasses.dataclass)
_stub("vllm.v1.core.kv_cache_utils", ExternalBlockHash=bytes | int)

# --- SGLang ---------------------------------------------------------------
_sglang = _package_dir("sglang", "sglang")
for pkg in (
    "sglang",
    "sglang.srt",
    "sglang.srt.disaggregation",
    "sglang.srt.mem_cache",
    "sglang.srt.mem_cache.cpp_utils",
    "sglang.srt.utils",
    "sglang.srt.arg_groups",
    "sglang.kernels",
    "sglang.kernels.ops",
    "sglang.kernels.ops.kvcache",
):
    _bare_package(pkg, os.path.join(_sglang, *pkg.split(".")[1:]))

_stub(
    "sglang.kernels.ops.kvcache.mla_buffer",
    **{
        n: _unavailable(n)
        for n in (
            "get_mla_kv_buffer_kernel",
            "get_mla_kv_buffer_triton",
            "set_mla_kv_buffer_dcp_sharded_triton",
            "set_mla_kv_buffer_fp8_quant_kernel",
            "set_mla_kv_buffer_kernel",
            "set_mla_kv_buffer_triton",
            "set_mla_kv_buffer_triton_fp8_quant",
            "set_mla_kv_scale_buffer_kernel",
            "set_mla_kv_scale_buffer_triton",
        )
    },
)


def _load_extension_with_recovery(name, sources, **kwargs):
    """Import the extension scripts/lib/pyenv.sh compiled from the wheel's own
    hash_binding.cpp (module hicache_hash_cpp) instead of building it with torch."""
    ext_dir = os.path.join(sys.prefix, "interop-ext")
    if name != "hicache_hash_cpp" or not os.path.isdir(ext_dir):
        raise RuntimeError("%s: not prebuilt in %s (run scripts/lib/pyenv.sh)" % (name, ext_dir))
    if ext_dir not in sys.path:
        sys.path.insert(0, ext_dir)
    import importlib

    return importlib.import_module(name)


_stub(
    "sglang.srt.utils.cpp_extension_loader",
    load_extension_with_recovery=_load_extension_with_recovery,
)


def versions():
    """The installed engine versions, for the test log."""
    return {d: importlib.metadata.version(d) for d in ("vllm", "sglang", "msgspec", "pyzmq")}
