"""A cleanup that runs however a test process ends: at interpreter exit, and on SIGTERM or
SIGINT (after which the previous handler, or the default action, still applies). Shared by the
helpers that leave things behind if a test dies (RabbitMQ nodes, network namespaces)."""

import atexit
import os
import signal
import threading


def run_at_exit(cleanup):
    """Registers `cleanup` (which must be safe to call twice) for exit and the two signals."""
    atexit.register(cleanup)
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be set from the main thread; atexit still applies

    def on_signal(signum, frame):
        cleanup()
        previous = previous_handlers.get(signum)
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    previous_handlers = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        previous_handlers[sig] = signal.getsignal(sig)
        if previous_handlers[sig] != signal.SIG_IGN:  # e.g. SIGINT in a background job
            signal.signal(sig, on_signal)
