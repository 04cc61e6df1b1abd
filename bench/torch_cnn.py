#!/usr/bin/python3
"""PyTorch baseline for the seed CNN (conv5x5x32, pool, conv5x5x64, pool, fc500, fc10; Adam 1e-4;
batch 50) on Fashion-MNIST. Uses Debian's python3-torch. Prints training images/s on one thread
and, with --steps N --eval, the test accuracy after N updates.

  /usr/bin/python3 bench/torch_cnn.py --bench-steps 100
  /usr/bin/python3 bench/torch_cnn.py --steps 5000 --eval
"""
import argparse, gzip, struct, time, sys
import numpy as np
import torch
import torch.nn as nn


def read_idx(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.fc = nn.Linear(7 * 7 * 64, 500)
        self.pred = nn.Linear(500, 10)
        for m in [self.conv1, self.conv2, self.fc, self.pred]:
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
        x = torch.relu(self.fc(x.flatten(1)))
        return self.pred(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--bench-steps", type=int, default=100)
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--eval", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    tx = read_idx(a.data + "/train-images-idx3-ubyte.gz").astype(np.float32) / 255
    ty = read_idx(a.data + "/train-labels-idx1-ubyte.gz").astype(np.int64)
    vx = read_idx(a.data + "/t10k-images-idx3-ubyte.gz").astype(np.float32) / 255
    vy = read_idx(a.data + "/t10k-labels-idx1-ubyte.gz").astype(np.int64)
    tx = torch.from_numpy(tx).reshape(-1, 1, 28, 28)
    ty = torch.from_numpy(ty)
    net = Net()
    opt = torch.optim.Adam(net.parameters(), lr=a.lr)
    loss_fn = nn.CrossEntropyLoss()
    rng = np.random.default_rng(0)

    def step():
        idx = torch.from_numpy(rng.integers(0, tx.shape[0], 50))
        opt.zero_grad()
        loss = loss_fn(net(tx[idx]), ty[idx])
        loss.backward()
        opt.step()

    for _ in range(5):
        step()
    t0 = time.perf_counter()
    for _ in range(a.bench_steps):
        step()
    dt = time.perf_counter() - t0
    print("torch_images_per_sec %.1f" % (a.bench_steps * 50 / dt))
    if a.steps:
        for i in range(a.steps):
            step()
        if a.eval:
            with torch.no_grad():
                out = net(torch.from_numpy(vx).reshape(-1, 1, 28, 28))
                acc = (out.argmax(1).numpy() == vy).mean()
            print("torch_test_accuracy %.4f" % acc)


if __name__ == "__main__":
    sys.exit(main())
