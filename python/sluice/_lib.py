"""ctypes bindings to libsluice, loaded on first use, never at import."""
import ctypes
import json
import os
import queue
import signal
import sys
import threading

_lock = threading.Lock()
_lib = None
_loaded_in_pid = None

FORK_ERROR = (
    "sluice: this process was forked after libsluice was loaded, and a Go runtime "
    "does not survive fork(). Use the 'spawn' or 'forkserver' start method "
    "(torch DataLoader(multiprocessing_context='spawn'), or "
    "multiprocessing.set_start_method('spawn')), or load sluice only in the children."
)


class SluiceError(RuntimeError):
    """An error from Sluice; the message is Go's."""


def _after_fork_in_child():
    global _lib
    if _lib is not None:
        _lib = _Forked()
    _idle.clear()  # their threads are the parent's


class _Forked:
    def __getattr__(self, name):
        raise SluiceError(FORK_ERROR)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _path():
    env = os.environ.get("SLUICE_LIB")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for p in (os.path.join(here, "libsluice.so"), os.path.join(here, "..", "..", "bin", "libsluice.so")):
        if os.path.exists(p):
            return p
    raise SluiceError("libsluice.so not found: run `make python` in the Sluice repository, or set SLUICE_LIB")


_u64p = ctypes.POINTER(ctypes.c_uint64)
_i64p = ctypes.POINTER(ctypes.c_int64)
_intp = ctypes.POINTER(ctypes.c_int)
_SIGNATURES = {
    "sluice_last_error": ([], ctypes.c_char_p),
    "sluice_version": ([], ctypes.c_char_p),
    "sluice_connect": ([ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int64, _u64p], ctypes.c_int),
    "sluice_cancel": ([], ctypes.c_int),
    "sluice_procs": ([ctypes.c_int], ctypes.c_int),
    "sluice_close": ([ctypes.c_uint64], ctypes.c_int),
    "sluice_dataset_open": ([ctypes.c_uint64, ctypes.c_char_p, _u64p], ctypes.c_int),
    "sluice_dataset_len": ([ctypes.c_uint64, _i64p], ctypes.c_int),
    "sluice_dataset_manifest": ([ctypes.c_uint64, ctypes.c_char_p, ctypes.c_int64, _i64p], ctypes.c_int),
    "sluice_dataset_take": (
        [ctypes.c_uint64, _i64p, ctypes.c_int64, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p],
        ctypes.c_int,
    ),
    "sluice_loader_new": ([ctypes.c_uint64, ctypes.c_char_p, _u64p], ctypes.c_int),
    "sluice_loader_stream": ([ctypes.c_uint64, ctypes.c_void_p], ctypes.c_int),
    "sluice_loader_state": ([ctypes.c_uint64, ctypes.c_char_p, ctypes.c_int64, _i64p], ctypes.c_int),
    "sluice_loader_resume": ([ctypes.c_uint64, ctypes.c_char_p], ctypes.c_int),
    "sluice_loader_set_epoch": ([ctypes.c_uint64, ctypes.c_int64], ctypes.c_int),
    "sluice_loader_wait": ([ctypes.c_uint64, ctypes.c_int, _intp], ctypes.c_int),
    "sluice_loader_steps": ([ctypes.c_uint64, _i64p], ctypes.c_int),
    "sluice_loader_memory": ([ctypes.c_uint64, _i64p, _u64p, _i64p], ctypes.c_int),
    "sluice_file_open": ([ctypes.c_uint64, ctypes.c_char_p, ctypes.c_int, _u64p], ctypes.c_int),
    "sluice_file_pread": ([ctypes.c_uint64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, _i64p], ctypes.c_int),
    "sluice_file_pwrite": ([ctypes.c_uint64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64], ctypes.c_int),
    "sluice_file_size": ([ctypes.c_uint64, _i64p], ctypes.c_int),
    "sluice_metrics": ([ctypes.c_uint64, ctypes.c_char_p, ctypes.c_int64, _i64p], ctypes.c_int),
    "sluice_stat": ([ctypes.c_uint64, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int64, _i64p], ctypes.c_int),
}


def lib():
    """The loaded library (loading it on first use)."""
    global _lib, _loaded_in_pid
    if _lib is None:
        with _lock:
            if _lib is None:
                l = ctypes.CDLL(_path())
                for name, (args, res) in _SIGNATURES.items():
                    fn = getattr(l, name)
                    fn.argtypes, fn.restype = args, res
                _loaded_in_pid = os.getpid()
                _lib = l
    if isinstance(_lib, _Forked) or _loaded_in_pid != os.getpid():
        raise SluiceError(FORK_ERROR)
    return _lib


def check(rc):
    """Raises the calling thread's last Go error when rc < 0."""
    if rc < 0:
        raise SluiceError(lib().sluice_last_error().decode("utf-8", "replace"))
    return rc


# Calls that return at once: run on the caller's thread, never handed off.
_QUICK = frozenset([
    "sluice_last_error", "sluice_version", "sluice_cancel", "sluice_procs", "sluice_dataset_len",
    "sluice_dataset_manifest",
    "sluice_loader_new", "sluice_loader_stream", "sluice_loader_state", "sluice_loader_resume",
    "sluice_loader_set_epoch", "sluice_loader_steps", "sluice_loader_memory", "sluice_file_size",
    "sluice_loader_wait",  # bounded by its timeout: how the main thread waits interruptibly
])

# How long an interrupted call is given to end (sluice_cancel cuts it
# short) before KeyboardInterrupt is raised anyway.
_CANCEL_WAIT = 5.0


class _Helper:
    """A thread that runs blocking calls for the main thread, one at a
    time, and goes back to the idle list after each (so one abandoned to
    Ctrl-C and still running is never handed another call)."""

    def __init__(self):
        self.jobs = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="sluice-call", daemon=True).start()

    def _serve(self):
        while True:
            self.jobs.get()()
            _idle.append(self)


_idle = []  # helpers waiting for a call

_direct = False  # calls on the main thread run there (uninterruptible)


def uninterruptible():
    """For a process that ignores Ctrl-C (SIGINT) and is stopped by its
    parent instead: its calls run on the thread that makes them, without
    the hand-over to a helper thread that makes them interruptible (two
    thread switches a call, which cost a worker making a batch of 4 KiB
    samples a quarter of its time)."""
    global _direct
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _direct = True


def handed_off():
    """Whether blocking() hands this thread's calls to a helper thread."""
    return not (_direct or threading.current_thread() is not threading.main_thread() or sys.is_finalizing())


def blocking(fn, *args):
    """fn(*args), for a call that may block on the cluster, run so that
    Ctrl-C interrupts it: Python delivers signals to the main thread only
    between bytecodes, never inside a ctypes call, so on the main thread the
    call runs on a helper thread while the main thread waits. On
    KeyboardInterrupt every call in flight is cancelled (sluice_cancel) and
    given a moment to end (so nothing writes into its buffers afterwards)
    before the interrupt goes on. On other threads, in a process that takes
    no Ctrl-C (uninterruptible(): sluice.torch's workers), and while the
    interpreter exits (no thread starts then), fn runs directly."""
    if not handed_off():
        return fn(*args)
    box = {}
    done = threading.Event()

    def run():
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # handed to the caller's thread
            box["error"] = e
        finally:
            done.set()

    try:
        helper = _idle.pop()
    except IndexError:
        helper = _Helper()
    helper.jobs.put(run)
    try:
        while not done.wait(0.1):
            pass
    except KeyboardInterrupt:
        lib().sluice_cancel()
        done.wait(_CANCEL_WAIT)
        raise
    if "error" in box:
        raise box.pop("error")
    return box["value"]


def call(name, *args):
    fn = getattr(lib(), name)
    if name in _QUICK:
        return check(fn(*args))
    # check runs on the same thread as fn: the last error is per thread.
    return blocking(lambda: check(fn(*args)))


def handle_out(name, *args):
    out = ctypes.c_uint64()
    call(name, *args, ctypes.byref(out))
    return out.value


def int_out(name, *args):
    out = ctypes.c_int64()
    call(name, *args, ctypes.byref(out))
    return out.value


def text_out(name, *args):
    """Calls a function that copies text (JSON) into a buffer, growing it
    as told."""
    size = 4096
    while True:
        buf = ctypes.create_string_buffer(size)
        needed = ctypes.c_int64()
        call(name, *args, buf, size, ctypes.byref(needed))
        if needed.value <= size:
            return buf.value.decode("utf-8")
        size = needed.value


def json_out(name, *args):
    return json.loads(text_out(name, *args))


def op_timeout_ns(seconds):
    """sluice_connect's opTimeoutNs for an op_timeout in seconds (None: the
    SLUICE_OP_TIMEOUT variable as it is now, else the default; 0: none)."""
    if seconds is None:
        env = os.environ.get("SLUICE_OP_TIMEOUT", "").strip()
        if not env:
            return 0  # the library's default (30 s)
        seconds = parse_duration(env)
    seconds = float(seconds)
    if seconds < 0:
        raise ValueError("op_timeout %r: must be 0 (none) or positive seconds" % seconds)
    if seconds == 0:
        return -1  # none
    return max(1, int(seconds * 1e9))


def parse_duration(text):
    """Seconds in "30", "2.5", "500ms", "30s" or "2m"."""
    t = text.strip()
    for suffix, scale in (("ms", 1e-3), ("s", 1.0), ("m", 60.0)):
        if t.endswith(suffix):
            t, mult = t[: -len(suffix)], scale
            break
    else:
        mult = 1.0
    try:
        return float(t) * mult
    except ValueError:
        raise ValueError("SLUICE_OP_TIMEOUT=%r: want seconds (30, 2.5) or 500ms, 30s, 2m" % text) from None


def close(h):
    if h:
        call("sluice_close", ctypes.c_uint64(h))
