"""The checked entry every kernel library exports, as LLVM IR, and the helpers that link it.

``int sparsecc_entry(void **args)`` (:func:`oom_entry_ir`) calls the packed MLIR entry
``sparsecc_entry__body`` under a jump buffer: every allocation of the kernel goes through a
checked wrapper (``sparsecc_malloc`` & co., :func:`redirect_allocations`), and one that fails
jumps back, so the entry returns 1; a guarded coordinate out of range sets the call's flag,
and it returns 2.  Used by the target's code generator (``targets.py``), the compile worker
(``_worker.py``), the disk-cache key (:data:`OOM_IR`) and ahead-of-time libraries.  Imports
nothing but llvmlite (inside functions): it runs in the compile worker too.
"""

from __future__ import annotations

ENTRY = "sparsecc_entry"
BODY = "__body"            # the MLIR packed entry is <entry>__body; <entry> is the checked entry (oom_entry_ir)
#: the C library functions generated code may allocate with, redirected to checked wrappers
ALLOCATORS = ("malloc", "calloc", "realloc", "aligned_alloc")

# Every allocation of a kernel is checked.  The generated code calls sparsecc_malloc & co.
# (the declarations are renamed after LLVM's optimization, which knows malloc's meaning);
# on NULL they longjmp back to the exported entry, which returns 1 instead of 0, and the
# Python call path raises MemoryError.  The kernel's temporaries allocated before that leak.
# In a thread other than the caller's (an OpenMP worker) there is nothing to jump back to:
# that still aborts.  Nested entries (another kernel's entry called while one runs in the
# same thread) save the outer jump buffer and restore it on the way out.
#
# The entry and the wrappers are LLVM IR (``oom_entry_ir``), linked into the kernel's own
# module before its object is emitted: no C compiler is involved.  Where the jump buffer
# of the running entry is kept depends on who loads the object:
#
# * ``"tls"``: a ``thread_local`` pointer, private to the object (the C equivalent is
#   ``static __thread jmp_buf *sparsecc_oom_jump``): for objects a system linker links into
#   a shared library (JIT kernels linked with ``cc``, ahead-of-time libraries);
# * ``"key"``: a POSIX thread-specific value (``pthread_getspecific``) under the key held
#   by the external ``int sparsecc_oom_key``, which the loader provides: for objects loaded
#   in-process by LLVM's ORC JIT (no C compiler), whose linker has no thread-local storage.
#   One key serves every kernel of the process.
OOM_VARIANTS = ("tls", "key")
_JMP_BUF_BYTES = 512      # >= sizeof(jmp_buf) (glibc: 200 on x86-64, 312 on AArch64)
_FLAG_OFFSET = _JMP_BUF_BYTES - 8     # the index flag's word at the end of that buffer, past any jmp_buf


# A request for more than half of the machine's physical memory (or than the
# SPARSECC_MAX_ALLOC_BYTES environment variable says, read at each such request) fails like
# a NULL from malloc.  Linux overcommits: a sparse result growing by doubling gets every
# realloc granted until touching its pages makes the kernel kill the whole process (SIGKILL,
# no MemoryError).  Half: the buffers of a result (values, coordinates) grow side by side.
# Requests under 64 MiB are never refused.  The constants are Linux's (sysconf's
# _SC_PHYS_PAGES 85, _SC_PAGESIZE 30).
_ALLOC_LIMIT_IR = (
    '@sparsecc_limit_env = private unnamed_addr constant [26 x i8] c"SPARSECC_MAX_ALLOC_BYTES\\00\\00"\n'
    "declare ptr @getenv(ptr)\n"
    "declare i64 @strtoll(ptr, ptr, i32)\n"
    "declare i64 @sysconf(i32)\n"
    "define internal i64 @sparsecc_alloc_limit() noinline {\n"
    "  %env = call ptr @getenv(ptr @sparsecc_limit_env)\n"
    "  %has = icmp ne ptr %env, null\n"
    "  br i1 %has, label %parse, label %phys\n"
    "parse:\n  %v = call i64 @strtoll(ptr %env, ptr null, i32 10)\n"
    "  %pos = icmp sgt i64 %v, 0\n"
    "  br i1 %pos, label %given, label %phys\n"
    "given:\n  ret i64 %v\n"
    "phys:\n  %pages = call i64 @sysconf(i32 85)\n"
    "  %psize = call i64 @sysconf(i32 30)\n"
    "  %known = icmp sgt i64 %pages, 0\n"
    "  %bytes = mul i64 %pages, %psize\n"
    "  %half = lshr i64 %bytes, 1\n"
    "  %lim = select i1 %known, i64 %half, i64 -1\n"
    "  ret i64 %lim\n}\n"
    "define internal void @sparsecc_check_size(i64 %n) {\n"
    "  %big = icmp ugt i64 %n, 67108864\n"
    "  br i1 %big, label %check, label %ok\n"
    "check:\n  %lim = call i64 @sparsecc_alloc_limit()\n"
    "  %over = icmp ugt i64 %n, %lim\n"
    "  br i1 %over, label %oom, label %ok\n"
    "oom:\n  call void @sparsecc_oom()\n  unreachable\n"
    "ok:\n  ret void\n}\n"
    # calloc's size is k * n: an overflowing product is refused too
    "declare { i64, i1 } @llvm.umul.with.overflow.i64(i64, i64)\n"
    "define internal void @sparsecc_check_product(i64 %k, i64 %n) {\n"
    "  %r = call { i64, i1 } @llvm.umul.with.overflow.i64(i64 %k, i64 %n)\n"
    "  %bytes = extractvalue { i64, i1 } %r, 0\n"
    "  %ovf = extractvalue { i64, i1 } %r, 1\n"
    "  br i1 %ovf, label %oom, label %size\n"
    "oom:\n  call void @sparsecc_oom()\n  unreachable\n"
    "size:\n  call void @sparsecc_check_size(i64 %bytes)\n  ret void\n}\n\n")


def _oom_wrapper(name: str, params: list[tuple[str, str]], nonzero: list[str], size: list[str]) -> str:
    """``ptr sparsecc_<name>(params)``: ``name``'s result, or the jump back to the entry when
    the request (the product of the ``size`` arguments) is over the limit, or the result is
    NULL while every argument in ``nonzero`` is not 0 (C: ``if (!p && n) oom()``)."""
    decl = ", ".join(f"{t} %{n}" for t, n in params)
    check = (f"  call void @sparsecc_check_size(i64 %{size[0]})\n" if len(size) == 1 else
             f"  call void @sparsecc_check_product(i64 %{size[0]}, i64 %{size[1]})\n")
    lines = ["  %null = icmp eq ptr %p, null"]
    bad = "%null"
    for k, n in enumerate(nonzero):
        lines += [f"  %nz{k} = icmp ne i64 %{n}, 0", f"  %bad{k} = and i1 {bad}, %nz{k}"]
        bad = f"%bad{k}"
    return (f"define hidden ptr @sparsecc_{name}({decl}) {{\n" + check
            + f"  %p = call ptr @{name}({decl})\n" + "\n".join(lines) + "\n"
            f"  br i1 {bad}, label %oom, label %ok\n"
            "oom:\n  call void @sparsecc_oom()\n  unreachable\n"
            "ok:\n  ret ptr %p\n}\n")


def oom_entry_ir(entry: str, variant: str) -> str:
    """LLVM IR of ``int <entry>(void **args)`` (0; 1 when an allocation failed; 2 when a
    guarded coordinate was out of range: ``passes/guards.py``) around
    ``void <entry>__body(void **args)``, and of the checked allocators, for ``variant``
    (:data:`OOM_VARIANTS`)."""
    if variant == "tls":
        state = ("@sparsecc_oom_jump = internal thread_local global ptr null, align 8\n"
                 "declare ptr @llvm.threadlocal.address.p0(ptr)\n")

        def get(v):
            return (f"  %{v}.slot = call ptr @llvm.threadlocal.address.p0(ptr @sparsecc_oom_jump)\n"
                    f"  %{v} = load ptr, ptr %{v}.slot\n")

        def put(tag, value):
            return (f"  %{tag}.slot = call ptr @llvm.threadlocal.address.p0(ptr @sparsecc_oom_jump)\n"
                    f"  store ptr {value}, ptr %{tag}.slot\n")
    elif variant == "key":
        state = ("@sparsecc_oom_key = external global i32\n"
                 "declare ptr @pthread_getspecific(i32)\n"
                 "declare i32 @pthread_setspecific(i32, ptr)\n")

        def get(v):
            return (f"  %{v}.key = load i32, ptr @sparsecc_oom_key\n"
                    f"  %{v} = call ptr @pthread_getspecific(i32 %{v}.key)\n")

        def put(tag, value):
            return (f"  %{tag}.key = load i32, ptr @sparsecc_oom_key\n"
                    f"  %{tag}.rc = call i32 @pthread_setspecific(i32 %{tag}.key, ptr {value})\n")
    else:
        raise ValueError(f"no out-of-memory entry variant {variant!r}")
    return (
        state
        + "declare i32 @_setjmp(ptr) returns_twice\n"
        "declare void @longjmp(ptr, i32) noreturn\n"
        "declare void @abort() noreturn\n"
        "declare ptr @malloc(i64)\n"
        "declare ptr @calloc(i64, i64)\n"
        "declare ptr @realloc(ptr, i64)\n"
        "declare ptr @aligned_alloc(i64, i64)\n"
        f"declare hidden void @{entry}{BODY}(ptr)\n\n"
        # no jump buffer (not inside an entry in this thread): nothing to go back to
        "define hidden void @sparsecc_oom() noinline noreturn {\n"
        + get("j")
        + "  %none = icmp eq ptr %j, null\n"
        "  br i1 %none, label %die, label %jump\n"
        "jump:\n  call void @longjmp(ptr %j, i32 1)\n  unreachable\n"
        "die:\n  call void @abort()\n  unreachable\n}\n\n"
        + _ALLOC_LIMIT_IR
        + _oom_wrapper("malloc", [("i64", "n")], ["n"], ["n"])
        + _oom_wrapper("calloc", [("i64", "k"), ("i64", "n")], ["k", "n"], ["k", "n"])
        + _oom_wrapper("realloc", [("ptr", "q"), ("i64", "n")], ["n"], ["n"])
        + _oom_wrapper("aligned_alloc", [("i64", "a"), ("i64", "n")], ["n"], ["n"])
        # this call's out-of-range flag: the last word of the running entry's jump buffer
        # (guarded coordinate loads store 1 there: passes/guards.py); outside an entry, a
        # private word nobody reads
        + "@sparsecc_index_flag_none = internal global i32 0, align 4\n"
        "define hidden ptr @sparsecc_index_flag() noinline {\n"
        + get("f")
        + "  %fnone = icmp eq ptr %f, null\n"
        f"  %fslot = getelementptr inbounds i8, ptr %f, i64 {_FLAG_OFFSET}\n"
        "  %fp = select i1 %fnone, ptr @sparsecc_index_flag_none, ptr %fslot\n"
        "  ret ptr %fp\n}\n"
        # the outer buffer is kept in a volatile slot: it is read after setjmp returns twice
        + f"\ndefine i32 @{entry}(ptr %args) {{\n"
        f"  %here = alloca [{_JMP_BUF_BYTES // 8} x i64], align 16\n"
        "  %outer = alloca ptr, align 8\n"
        + get("o")
        + "  store volatile ptr %o, ptr %outer\n"
        + put("in", "%here")
        + f"  %flag = getelementptr inbounds i8, ptr %here, i64 {_FLAG_OFFSET}\n"
        "  store i32 0, ptr %flag, align 4\n"
        "  %r = call i32 @_setjmp(ptr %here) returns_twice\n"
        "  %again = icmp ne i32 %r, 0\n"
        "  br i1 %again, label %failed, label %run\n"
        f"run:\n  call void @{entry}{BODY}(ptr %args)\n"
        "  %o1 = load volatile ptr, ptr %outer\n"
        + put("out1", "%o1")
        + "  %bad = load volatile i32, ptr %flag, align 4\n"
        "  %isbad = icmp ne i32 %bad, 0\n"
        "  %rc = select i1 %isbad, i32 2, i32 0\n"
        "  ret i32 %rc\n"
        "failed:\n  %o2 = load volatile ptr, ptr %outer\n"
        + put("out2", "%o2")
        + "  ret i32 1\n}\n")


#: what the disk-cache key hashes for the entry glue (both variants)
OOM_IR = "".join(oom_entry_ir("E", v) for v in OOM_VARIANTS)
#: the checked functions the generated code calls, internal to each object
_OOM_INTERNAL = ("sparsecc_oom", "sparsecc_index_flag", "sparsecc_alloc_limit", "sparsecc_check_size",
                 "sparsecc_check_product", *(f"sparsecc_{a}" for a in ALLOCATORS))


def add_oom_entry(mod, entry: str, variant: str) -> None:
    """Link the checked-allocation entry ``entry`` (:func:`oom_entry_ir`) into llvmlite
    module ``mod`` (after :func:`redirect_allocations`); the wrappers become internal, so
    several objects can be linked into one library."""
    import llvmlite.binding as llb
    glue = llb.parse_assembly(oom_entry_ir(entry, variant))
    glue.verify()
    mod.link_in(glue)
    for fn in mod.functions:
        if fn.name in _OOM_INTERNAL and not fn.is_declaration:
            fn.linkage = "internal"
    mod.verify()


def imports_of(mod) -> list[str]:
    """The symbols llvmlite module ``mod`` needs from elsewhere (functions and globals)."""
    names = [fn.name for fn in mod.functions if fn.is_declaration and not fn.name.startswith("llvm.")]
    names += [g.name for g in mod.global_variables if g.is_declaration]
    return sorted(set(names))


def redirect_allocations(mod) -> None:
    """Point the calls to C allocators in llvmlite module ``mod`` at the checked wrappers."""
    for fn in mod.functions:
        if fn.is_declaration and fn.name in ALLOCATORS:
            fn.name = f"sparsecc_{fn.name}"


class Rejected(Exception):
    """MLIR or LLVM refused the kernel (or the linker failed): not a bug in sparsecc."""
