"""One training job for test/gpu/check.sh's row 11: a multilayer
perceptron (--layers linear layers of --width, bf16, a batch of --batch)
trained with SGD on a fixed batch, reading the loss (a synchronization)
every --sync-every steps, as a training loop that logs its loss does.

Warms up, prints "ready: pid=P", then trains until SIGTERM or SIGINT and
writes to --out one record per synchronization:

  progress TIME STEPS   CLOCK_REALTIME ns when the loss was read, and the
                        steps finished on the GPU by then

then prints one line:

  torch_train: pid=P steps=N seconds=S steps_per_s=R loss=L
"""
import argparse
import os
import signal
import time

import torch

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--width", type=int, default=4096)
parser.add_argument("--layers", type=int, default=4)
parser.add_argument("--batch", type=int, default=2048)
parser.add_argument("--sync-every", type=int, default=4)
parser.add_argument("--out", required=True)
args = parser.parse_args()

stop = False


def on_stop(signum, frame):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_stop)
signal.signal(signal.SIGINT, on_stop)

torch.manual_seed(0)
layers = []
for _ in range(args.layers):
    layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
model = torch.nn.Sequential(*layers[:-1]).to("cuda", torch.bfloat16)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(args.batch, args.width, device="cuda", dtype=torch.bfloat16)
y = torch.randn(args.batch, args.width, device="cuda", dtype=torch.bfloat16)


def step():
    optimizer.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


for _ in range(3):
    step()
torch.cuda.synchronize()
print("ready: pid=%d" % os.getpid(), flush=True)

records, steps, loss = [], 0, 0.0
start = time.monotonic()
while not stop:
    for _ in range(args.sync_every):
        last = step()
    loss = last.item()
    steps += args.sync_every
    records.append((time.time_ns(), steps))
seconds = time.monotonic() - start

with open(args.out, "w") as f:
    f.writelines("progress %d %d\n" % r for r in records)
print("torch_train: pid=%d steps=%d seconds=%.3f steps_per_s=%.1f loss=%.4f"
      % (os.getpid(), steps, seconds, steps / seconds if seconds else 0.0, loss), flush=True)
