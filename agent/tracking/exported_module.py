# The fixed half of the module `warpsmith export` writes (kernel.py), from warpsmith's
# agent/tracking/exported_module.py. Above it, the generated half (launch_module.py):
# WORKLOAD, KERNEL, ENTRY, OPTIONS, KNOBS, ARRAYS, SCALARS, PARAMS, SIZES, NEEDED,
# BINDS, OP_NAME, OP_SCHEMA, OP_SIZES, SOURCE, PROGRAM, WORKSPACE and the functions
# _shapes, _scalars, _launch_rule, _workspace_sizes and _program, over the helpers of
# agent/spec/expr.py (PYTHON_HELPERS). warpsmith
# never imports this file; the module imports nothing of warpsmith, and nothing at all
# until it launches (CuPy, NumPy) or registers a torch op.
# ruff: noqa: F821
_DTYPES = {"f2": "float16", "f4": "float32", "f8": "float64", "i1": "int8", "i2": "int16", "i4": "int32",
           "i8": "int64", "u1": "uint8", "u2": "uint16", "u4": "uint32", "u8": "uint64", "b1": "bool"}
_INT_RANGES = {"int32": (-2**31, 2**31 - 1), "int64": (-2**63, 2**63 - 1)}
_SHARED_DEFAULT_LIMIT = 48 * 1024  # above it, dynamic shared memory is opted into per kernel
_FUNCTIONS = {}  # (device, entry) -> the loaded kernel (a CuPy RawKernel), compiled once per device
_MODULES = {}  # device -> the compiled source (a CuPy RawModule)
_ITEMSIZE = {"float32": 4, "float64": 8, "int32": 4, "int64": 8, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1,
             "float8_e5m2": 1, "bool": 1}
_MAX_WORKSPACE_BYTES = 16 << 30  # one buffer: agent/spec/launch.py's MAX_WORKSPACE_BYTES
_TORCH_OPS = {}  # "namespace::name" -> (torch.library.Library, op): registered once per process


def _is_torch(a):
    return type(a).__module__.split(".")[0] == "torch"


def _dense(shape, strides, itemsize):
    """Row-major and packed; a dimension of extent 1 may have any stride (as torch says)."""
    if strides is None:
        return True
    step = itemsize
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent != 1 and stride != step:
            return False
        step *= extent
    return True


def _view(name, a):
    """(shape, dtype, dense) of a CUDA torch tensor or anything with the CUDA array
    interface (CuPy, Numba...); TypeError for anything not on the GPU."""
    if _is_torch(a):
        if not a.is_cuda:
            raise TypeError(f"{WORKLOAD}: {name} is a CPU tensor; pass a CUDA tensor ({name}.cuda())")
        return tuple(a.shape), str(a.dtype).replace("torch.", ""), a.is_contiguous()
    cai = getattr(a, "__cuda_array_interface__", None)
    if cai is None:
        raise TypeError(f"{WORKLOAD}: {name} is a {type(a).__module__}.{type(a).__name__}, not on the GPU; "
                        "pass a CuPy array or a CUDA torch tensor")
    shape, typestr = tuple(cai["shape"]), cai["typestr"]
    return shape, _DTYPES.get(typestr[1:], typestr), _dense(shape, cai.get("strides"), int(typestr[2:]))


def sizes_of(*arrays, **sizes):
    """Check the arrays (in the kernel's order) against its parameters: count, dtype,
    rank, shape, dense row-major layout. Returns the sizes they imply, with those given
    as keywords. Raises TypeError or ValueError, one line naming the parameter."""
    if len(arrays) != len(ARRAYS):
        raise TypeError(f"{WORKLOAD}: takes {len(ARRAYS)} arrays ({', '.join(a[0] for a in ARRAYS)}), "
                        f"got {len(arrays)}")
    for key, value in sizes.items():
        if key not in SIZES:
            raise TypeError(f"{WORKLOAD}: unknown size {key!r} (the sizes are {', '.join(SIZES)})")
        if isinstance(value, bool) or not hasattr(value, "__index__"):
            raise TypeError(f"{WORKLOAD}: size {key} = {value!r} is not an integer")
    views = []
    for (name, _, dtype, dims), a in zip(ARRAYS, arrays):
        shape, got, dense = _view(name, a)
        if got != dtype:
            raise TypeError(f"{WORKLOAD}: {name} is {got}, expected {dtype}")
        if len(shape) != len(dims):
            raise ValueError(f"{WORKLOAD}: {name} has {len(shape)} dimensions {shape}, expected {len(dims)} "
                             f"({', '.join(dims)})")
        if not dense:
            raise ValueError(f"{WORKLOAD}: {name} is not dense row-major (C-contiguous); pass a contiguous copy")
        views.append(shape)
    s = dict(sizes)
    for i, d, size in BINDS:
        s.setdefault(size, views[i][d])
    for size in NEEDED:
        if size not in s:
            raise TypeError(f"{WORKLOAD}: size {size} is no array's dimension; pass it: {size}=...")
        if s[size] < 1:
            raise ValueError(f"{WORKLOAD}: size {size} = {s[size]}; the kernel was validated for sizes of at least 1")
    for (name, _, _, dims), shape, expected in zip(ARRAYS, views, _shapes(s)):
        if tuple(shape) != tuple(expected):
            raise ValueError(f"{WORKLOAD}: {name} has shape {tuple(shape)}, expected ({', '.join(dims)}) = "
                             f"{tuple(expected)}")
    return s


def scalars(**sizes):
    """The kernel's scalar arguments for these sizes, checked against their dtypes."""
    values = _scalars(sizes)
    for (name, dtype), value in zip(SCALARS, values):
        low, high = _INT_RANGES.get(dtype, (value, value))
        if not low <= value <= high:
            raise ValueError(f"{WORKLOAD}: {name} = {value} does not fit the kernel's {dtype} parameter")
    return values


def launch_config(**sizes):
    """(grid, block, dynamic shared memory bytes) for these sizes: the launch rule the
    kernel was validated with, over the sizes and the knobs it was compiled with."""
    grid, block, shared = _launch_rule(sizes)
    _checked(grid, block, shared, sizes, "launch")
    return grid, block, shared


def _checked(grid, block, shared, sizes, what):
    if min(grid + block) < 1 or shared < 0:
        raise ValueError(f"{WORKLOAD}: {what} grid {grid}, block {block}, shared {shared} for {sizes} "
                         "has a dimension below 1")
    if block[0] * block[1] * block[2] > 1024 or grid[0] > 2**31 - 1 or max(grid[1:]) > 65535:
        raise ValueError(f"{WORKLOAD}: {what} grid {grid}, block {block} for {sizes} exceeds CUDA's limits")


def program_config(**sizes):
    """A program's steps for these sizes, as validated: ("launch", entry, grid, block,
    shared, args) and ("memset", buffer), and its workspace sizes in elements; ((), ())
    for a single launch."""
    steps, counts = _program(sizes), _workspace_sizes(sizes)
    for step in steps:
        if step[0] == "launch":
            _checked(step[2], step[3], step[4], sizes, f"step {step[1]}:")
    for (name, dtype, _), count in zip(WORKSPACE, counts):
        if count < 1 or count * _ITEMSIZE[dtype] > _MAX_WORKSPACE_BYTES:
            raise ValueError(f"{WORKLOAD}: workspace {name} has {count} elements for {sizes}, outside 1 to "
                             f"{_MAX_WORKSPACE_BYTES // _ITEMSIZE[dtype]} (the limit it was validated under)")
    return steps, counts


def _cupy():
    try:
        import cupy
        import numpy
    except ImportError:
        raise ImportError(f"{WORKLOAD}: launching needs CuPy: pip install cupy-cuda13x "
                          "(cupy-cuda12x for a CUDA 12 driver)") from None
    return cupy, numpy


def _function(cupy, device, entry=None):
    key = (device, entry or ENTRY)
    if key not in _FUNCTIONS:
        if device not in _MODULES:
            _MODULES[device] = cupy.RawModule(code=SOURCE, options=OPTIONS)
        _FUNCTIONS[key] = _MODULES[device].get_function(key[1])
    return _FUNCTIONS[key]


def _device(a):
    if _is_torch(a):
        return a.get_device()
    device = getattr(a, "device", None)
    return getattr(device, "id", None)


def _pointer(a):
    return a.data_ptr() if _is_torch(a) else a.__cuda_array_interface__["data"][0]


def launch(*arrays, **sizes):
    """Run the kernel on `arrays` (CuPy arrays, or CUDA torch tensors; all of one kind, in
    the kernel's order; outputs are written in place) on the current stream: CuPy's, or
    torch.cuda.current_stream(). Sizes no array's shape gives are keywords."""
    s = sizes_of(*arrays, **sizes)
    values = scalars(**s)
    grid, block, shared = launch_config(**s)
    if PROGRAM:
        program_config(**s)  # every step checked before any GPU work
    kinds = {_is_torch(a) for a in arrays}
    if len(kinds) > 1:
        raise TypeError(f"{WORKLOAD}: pass all CuPy arrays or all torch tensors, not a mix")
    devices = {_device(a) for a in arrays} - {None}
    if len(devices) > 1:
        raise ValueError(f"{WORKLOAD}: the arrays are on different GPUs ({sorted(devices)})")
    cupy, numpy = _cupy()
    device = devices.pop() if devices else cupy.cuda.runtime.getDevice()
    packed = tuple(numpy.uint64(_pointer(arrays[i])) if kind == "array" else getattr(numpy, SCALARS[i][1])(values[i])
                   for kind, i in PARAMS)
    with cupy.cuda.Device(device):
        if True in kinds:
            import torch
            with cupy.cuda.ExternalStream(torch.cuda.current_stream(device).cuda_stream, device):
                _run(cupy, numpy, device, arrays, s, values, packed, grid, block, shared)
        else:
            _run(cupy, numpy, device, arrays, s, values, packed, grid, block, shared)


def _run(cupy, numpy, device, arrays, s, values, packed, grid, block, shared):
    """On CuPy's current stream: the one launch, or every step of the program over new
    workspace (CuPy's pool gives it back when this returns; the pool orders reuse after
    the work on this stream)."""
    if not PROGRAM:
        _call(_function(cupy, device), grid, block, packed, shared)
        return
    steps, counts = program_config(**s)
    workspace = [cupy.zeros(n, dtype) if init == "zero" else cupy.empty(n, dtype)
                 for (_, dtype, init), n in zip(WORKSPACE, counts)]
    pointers = {"array": [_pointer(a) for a in arrays], "workspace": [w.data.ptr for w in workspace]}
    shapes = _shapes(s)
    nbytes = {"array": [_ITEMSIZE[a[2]] * _count(shape) for a, shape in zip(ARRAYS, shapes)],
              "workspace": [w.nbytes for w in workspace]}
    stream = cupy.cuda.get_current_stream()
    for step in steps:
        if step[0] == "memset":
            kind, i = step[1]
            cupy.cuda.runtime.memsetAsync(pointers[kind][i], 0, nbytes[kind][i], stream.ptr)
            continue
        _, entry, grid, block, shared, step_args = step
        step_packed = tuple(numpy.uint64(pointers[a[0]][a[1]]) if a[0] in pointers else
                            getattr(numpy, SCALARS[a[1]][1])(values[a[1]]) if a[0] == "param" else
                            getattr(numpy, a[1])(a[2]) for a in step_args)
        _call(_function(cupy, device, entry), grid, block, step_packed, shared)


def _count(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _call(fn, grid, block, packed, shared):
    if shared > _SHARED_DEFAULT_LIMIT:
        fn.max_dynamic_shared_size_bytes = shared
    fn(grid, block, packed, shared_mem=shared)


def register_torch_op(op_namespace="warpsmith", name=None):
    """Register the kernel as a PyTorch custom op, torch.ops.NAMESPACE.NAME (NAME: the
    workload's), taking the input tensors (and the sizes no input's shape gives, as
    ints) and returning new output tensors; with a fake implementation, so
    torch.compile traces through it. Returns the op. Registered once per process."""
    import torch
    name = name or OP_NAME
    qualname = f"{op_namespace}::{name}"
    if qualname not in _TORCH_OPS:
        lib = torch.library.Library(op_namespace, "FRAGMENT")
        lib.define(name + OP_SCHEMA)
        lib.impl(name, _op(torch, run=True), "CUDA")
        torch.library.register_fake(qualname, _op(torch, run=False), lib=lib)
        _TORCH_OPS[qualname] = (lib, getattr(getattr(torch.ops, op_namespace), name))
    return _TORCH_OPS[qualname][1]


def _op(torch, run):
    """The op's body: new outputs shaped from the inputs' sizes, then (run) the kernel."""
    inputs = [i for i, a in enumerate(ARRAYS) if a[1] == "input"]

    def op(*args):
        tensors = [t.contiguous() if run else t for t in args[:len(inputs)]]
        given = dict(zip(OP_SIZES, args[len(inputs):]))
        s = dict(given)
        for i, d, size in BINDS:
            if i in inputs:
                s.setdefault(size, tensors[inputs.index(i)].shape[d])
        device = tensors[0].device if tensors else torch.device("cuda", torch.cuda.current_device())
        shapes = _shapes(s)
        arrays = [tensors[inputs.index(i)] if role == "input" else
                  torch.empty(shapes[i], dtype=getattr(torch, dtype), device=device)
                  for i, (_, role, dtype, _) in enumerate(ARRAYS)]
        if run:
            launch(*arrays, **given)
        outputs = [a for a, (_, role, _, _) in zip(arrays, ARRAYS) if role == "output"]
        return outputs[0] if len(outputs) == 1 else tuple(outputs)
    return op
