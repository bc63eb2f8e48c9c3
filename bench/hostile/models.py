import io, os, signal, subprocess, sys, time
import torch

def _m():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU())

class Act(torch.nn.Module):
    def __init__(self, act):
        super().__init__(); self.act = act; self.lin = torch.nn.Linear(16, 16); self.done = False
    def forward(self, x):
        if not self.done:
            self.done = True
            a = self.act
            if a == "fork":
                if os.fork() == 0:
                    time.sleep(300); os._exit(0)
            elif a == "ignterm_hang":
                signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)
            elif a == "close2":
                os.close(2)
            elif a == "stderr_none":
                sys.stderr = None
            elif a == "devnull1":
                fd = os.open(os.devnull, os.O_WRONLY); os.dup2(fd, 1); os.close(fd)
            elif a == "alarm":
                signal.signal(signal.SIGALRM, lambda *a: None); time.sleep(30)
            elif a == "sysexit":
                raise SystemExit(0)
            elif a == "kbint":
                raise KeyboardInterrupt
            elif a == "partial":
                sys.stdout.write("no newline here"); sys.stdout.flush()
            elif a == "chdir":
                os.chdir("/")
            elif a == "helper":
                subprocess.Popen(["sleep", "300"])
            elif a == "hang":
                time.sleep(600)
            elif a == "pgrp_helper":   # a helper in its own process group, holding stdout
                subprocess.Popen(["sleep", "300"], start_new_session=True)
            elif a == "threads_exit":
                import threading
                threading.Thread(target=lambda: (time.sleep(0.05), os._exit(3)), daemon=True).start()
        return self.lin(x)

def make():
    return Act(os.environ["ACT"])

def factory_exit():
    sys.exit(0)
