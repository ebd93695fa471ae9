"""A two-layer GCN (Kipf & Welling) on Zachary's karate club, through sparsecc.torch.

The normalized adjacency D^-1/2 (A + I) D^-1/2 is a torch CSR tensor; both graph
convolutions (forward and backward) run as sparsecc kernels: the forward SpMM and, for the
gradient of the dense features, the transposed SpMM, both compiled.  The same model with
torch.sparse.mm trains from the same initial weights, and the two are compared:

    python examples/torch/gcn.py [--epochs 200]
"""

import argparse
import time
import warnings

import networkx as nx
import numpy as np
import torch

import sparsecc.torch as sct

warnings.filterwarnings("ignore", message=".*Sparse CSR tensor support is in beta.*")


def karate():
    g = nx.karate_club_graph()
    n = g.number_of_nodes()
    a = nx.to_numpy_array(g, nodelist=range(n), weight=None) + np.eye(n)
    d = 1.0 / np.sqrt(a.sum(1))
    a_hat = torch.from_numpy(d[:, None] * a * d[None, :]).to_sparse_csr()
    labels = torch.tensor([0 if g.nodes[v]["club"] == "Mr. Hi" else 1 for v in range(n)])
    return a_hat, labels


class GCN(torch.nn.Module):
    def __init__(self, n_in, n_hidden, n_out, spmm):
        super().__init__()
        self.w1 = torch.nn.Linear(n_in, n_hidden, dtype=torch.float64)
        self.w2 = torch.nn.Linear(n_hidden, n_out, dtype=torch.float64)
        self.spmm = spmm

    def forward(self, a_hat, x):
        h = torch.relu(self.spmm(a_hat, self.w1(x)))
        return self.spmm(a_hat, self.w2(h))


def spmm_sparsecc(a, b):
    return sct.einsum("ij,jk->ik", a, b)


def train(spmm, a_hat, labels, train_mask, epochs, seed):
    torch.manual_seed(seed)
    n = a_hat.shape[0]
    x = torch.eye(n, dtype=torch.float64)       # one-hot node features
    model = GCN(n, 16, 2, spmm)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    t0 = time.perf_counter()
    for _ in range(epochs):
        opt.zero_grad()
        out = model(a_hat, x)
        loss = torch.nn.functional.cross_entropy(out[train_mask], labels[train_mask])
        loss.backward()
        opt.step()
    per_epoch = (time.perf_counter() - t0) / epochs
    with torch.no_grad():
        pred = model(a_hat, x).argmax(1)
    acc = (pred[~train_mask] == labels[~train_mask]).double().mean().item()
    return acc, per_epoch, loss.item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=200)
    args = ap.parse_args()
    a_hat, labels = karate()
    g = torch.Generator().manual_seed(0)
    train_mask = torch.zeros(len(labels), dtype=torch.bool)
    train_mask[torch.randperm(len(labels), generator=g)[:10]] = True     # 10 labelled nodes
    spmm_sparsecc(a_hat, torch.ones(a_hat.shape[0], 2, dtype=torch.float64))   # compile before timing
    acc_sc, t_sc, loss_sc = train(spmm_sparsecc, a_hat, labels, train_mask, args.epochs, seed=1)
    acc_t, t_t, loss_t = train(torch.sparse.mm, a_hat, labels, train_mask, args.epochs, seed=1)
    print(f"sparsecc.torch:   test accuracy {acc_sc:.3f}, final loss {loss_sc:.6f}, {t_sc * 1e3:.2f} ms per epoch")
    print(f"torch.sparse.mm:  test accuracy {acc_t:.3f}, final loss {loss_t:.6f}, {t_t * 1e3:.2f} ms per epoch")
    same = abs(loss_sc - loss_t) <= 1e-6 * max(1.0, abs(loss_t)) and acc_sc == acc_t
    print("results match:", "yes" if same else "no")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
