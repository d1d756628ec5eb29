"""Fourier Neural Operator for 2-D Darcy flow, written the way the reference ``fourier_2d.py``
(Li et al., ICLR 2021) is: SpectralConv2d with complex ``cfloat`` weights, ``torch.fft.rfft2``,
a complex ``torch.einsum``, complex slice assignment into ``out_ft`` (both corners of the
spectrum), ``torch.fft.irfft2(s=...)``, the domain padded by 9, UnitGaussianNormalizer, LpLoss
with ``torch.norm``, Adam with weight decay, StepLR.

The data are tiny Darcy problems: -div(a grad u) = 1 on the unit square, u = 0 on the boundary,
a = 12 or 3 from a thresholded smooth random field, five-point finite differences (SciPy).
"""

import os

if os.environ.get("TORCHLEAN_PROGRAMS_FRAMEWORK", "torchlean") == "torch":
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
else:
    import torchlean as torch
    import torchlean.nn as nn
    import torchlean.nn.functional as F

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import spsolve

from _common import cli, np_init, np_rng


################################################################
# fourier layer
################################################################
class SpectralConv2d(nn.Module):
    def __init__(self, in_channels, out_channels, modes1, modes2):
        super(SpectralConv2d, self).__init__()

        """
        2D Fourier layer. It does FFT, linear transform, and Inverse FFT.
        """

        self.in_channels = in_channels
        self.out_channels = out_channels
        self.modes1 = modes1  # Number of Fourier modes to multiply, at most floor(N/2) + 1
        self.modes2 = modes2

        self.scale = (1 / (in_channels * out_channels))
        self.weights1 = nn.Parameter(
            self.scale * torch.rand(in_channels, out_channels, self.modes1, self.modes2, dtype=torch.cfloat))
        self.weights2 = nn.Parameter(
            self.scale * torch.rand(in_channels, out_channels, self.modes1, self.modes2, dtype=torch.cfloat))

    # Complex multiplication
    def compl_mul2d(self, input, weights):
        # (batch, in_channel, x,y ), (in_channel, out_channel, x,y) -> (batch, out_channel, x,y)
        return torch.einsum("bixy,ioxy->boxy", input, weights)

    def forward(self, x):
        batchsize = x.shape[0]
        # Compute Fourier coeffcients up to factor of e^(- something constant)
        x_ft = torch.fft.rfft2(x)

        # Multiply relevant Fourier modes
        out_ft = torch.zeros(batchsize, self.out_channels, x.size(-2), x.size(-1) // 2 + 1, dtype=torch.cfloat,
                             device=x.device)
        out_ft[:, :, :self.modes1, :self.modes2] = \
            self.compl_mul2d(x_ft[:, :, :self.modes1, :self.modes2], self.weights1)
        out_ft[:, :, -self.modes1:, :self.modes2] = \
            self.compl_mul2d(x_ft[:, :, -self.modes1:, :self.modes2], self.weights2)

        # Return to physical space
        x = torch.fft.irfft2(out_ft, s=(x.size(-2), x.size(-1)))
        return x


class FNO2d(nn.Module):
    def __init__(self, modes1, modes2, width):
        super(FNO2d, self).__init__()

        """
        The overall network. It contains 4 layers of the Fourier layer.
        1. Lift the input to the desire channel dimension by self.fc0 .
        2. 4 layers of the integral operators u' = (W + K)(u).
            W defined by self.w; K defined by self.conv .
        3. Project from the channel space to the output space by self.fc1 and self.fc2 .

        input: the solution of the coefficient function and locations (a(x, y), x, y)
        input shape: (batchsize, x=s, y=s, c=3)
        output: the solution
        output shape: (batchsize, x=s, y=s, c=1)
        """

        self.modes1 = modes1
        self.modes2 = modes2
        self.width = width
        self.padding = 9  # pad the domain if input is non-periodic
        self.fc0 = nn.Linear(3, self.width)  # input channel is 3: (a(x, y), x, y)

        self.conv0 = SpectralConv2d(self.width, self.width, self.modes1, self.modes2)
        self.conv1 = SpectralConv2d(self.width, self.width, self.modes1, self.modes2)
        self.conv2 = SpectralConv2d(self.width, self.width, self.modes1, self.modes2)
        self.conv3 = SpectralConv2d(self.width, self.width, self.modes1, self.modes2)
        self.w0 = nn.Conv2d(self.width, self.width, 1)
        self.w1 = nn.Conv2d(self.width, self.width, 1)
        self.w2 = nn.Conv2d(self.width, self.width, 1)
        self.w3 = nn.Conv2d(self.width, self.width, 1)

        self.fc1 = nn.Linear(self.width, 128)
        self.fc2 = nn.Linear(128, 1)

    def forward(self, x):
        grid = self.get_grid(x.shape, x.device)
        x = torch.cat((x, grid), dim=-1)
        x = self.fc0(x)
        x = x.permute(0, 3, 1, 2)
        x = F.pad(x, [0, self.padding, 0, self.padding])

        x1 = self.conv0(x)
        x2 = self.w0(x)
        x = x1 + x2
        x = F.gelu(x)

        x1 = self.conv1(x)
        x2 = self.w1(x)
        x = x1 + x2
        x = F.gelu(x)

        x1 = self.conv2(x)
        x2 = self.w2(x)
        x = x1 + x2
        x = F.gelu(x)

        x1 = self.conv3(x)
        x2 = self.w3(x)
        x = x1 + x2

        x = x[..., :-self.padding, :-self.padding]
        x = x.permute(0, 2, 3, 1)
        x = self.fc1(x)
        x = F.gelu(x)
        x = self.fc2(x)
        return x

    def get_grid(self, shape, device):
        batchsize, size_x, size_y = shape[0], shape[1], shape[2]
        gridx = torch.tensor(np.linspace(0, 1, size_x), dtype=torch.float)
        gridx = gridx.reshape(1, size_x, 1, 1).repeat([batchsize, 1, size_y, 1])
        gridy = torch.tensor(np.linspace(0, 1, size_y), dtype=torch.float)
        gridy = gridy.reshape(1, 1, size_y, 1).repeat([batchsize, size_x, 1, 1])
        return torch.cat((gridx, gridy), dim=-1).to(device)


################################################################
# utilities (the reference's utilities3.py)
################################################################
class UnitGaussianNormalizer(object):
    def __init__(self, x, eps=0.00001):
        super(UnitGaussianNormalizer, self).__init__()

        # x could be in shape of ntrain*n or ntrain*T*n or ntrain*n*T
        self.mean = torch.mean(x, 0)
        self.std = torch.std(x, 0)
        self.eps = eps

    def encode(self, x):
        x = (x - self.mean) / (self.std + self.eps)
        return x

    def decode(self, x, sample_idx=None):
        std = self.std + self.eps  # n
        mean = self.mean
        x = (x * std) + mean
        return x

    def to(self, device):
        self.mean = self.mean.to(device)
        self.std = self.std.to(device)
        return self


# loss function with rel/abs Lp loss
class LpLoss(object):
    def __init__(self, d=2, p=2, size_average=True, reduction=True):
        super(LpLoss, self).__init__()

        # Dimension and Lp-norm type are postive
        assert d > 0 and p > 0

        self.d = d
        self.p = p
        self.reduction = reduction
        self.size_average = size_average

    def rel(self, x, y):
        num_examples = x.size()[0]

        diff_norms = torch.norm(x.reshape(num_examples, -1) - y.reshape(num_examples, -1), self.p, 1)
        y_norms = torch.norm(y.reshape(num_examples, -1), self.p, 1)

        if self.reduction:
            if self.size_average:
                return torch.mean(diff_norms / y_norms)
            else:
                return torch.sum(diff_norms / y_norms)

        return diff_norms / y_norms

    def __call__(self, x, y):
        return self.rel(x, y)


################################################################
# data: tiny Darcy flow problems
################################################################
def darcy(n, s, seed):
    """n pairs (a, u) on an s x s grid of the unit square (float32)."""
    rng = np_rng(seed, "darcy")
    xs = np.linspace(0, 1, s)
    k = np.arange(1, 5)
    basis = np.cos(np.pi * k[:, None] * xs[None, :])                      # (4, s)
    coef = rng.standard_normal((n, 4, 4)) / (k[:, None] ** 2 + k[None, :] ** 2)
    field = np.einsum("nij,ix,jy->nxy", coef, basis, basis)
    a = np.where(field >= 0, 12.0, 3.0)
    m = s - 2
    idx = np.arange(m * m).reshape(m, m)
    u = np.zeros((n, s, s))
    for t in range(n):
        c = a[t]
        faces = [(0.5 * (c[1:-1, 1:-1] + c[:-2, 1:-1]), -1, 0), (0.5 * (c[1:-1, 1:-1] + c[2:, 1:-1]), 1, 0),
                 (0.5 * (c[1:-1, 1:-1] + c[1:-1, :-2]), 0, -1), (0.5 * (c[1:-1, 1:-1] + c[1:-1, 2:]), 0, 1)]
        rows, cols, vals = [idx.ravel()], [idx.ravel()], [sum(f for f, _, _ in faces).ravel()]
        ii, jj = np.meshgrid(np.arange(m), np.arange(m), indexing="ij")
        for f, di, dj in faces:
            ok = (ii + di >= 0) & (ii + di < m) & (jj + dj >= 0) & (jj + dj < m)
            rows.append(idx[ok])
            cols.append(idx[ii[ok] + di, jj[ok] + dj])
            vals.append(-f[ok])
        mat = sp.csc_matrix((np.concatenate(vals) * (s - 1) ** 2, (np.concatenate(rows), np.concatenate(cols))),
                            shape=(m * m, m * m))
        u[t, 1:-1, 1:-1] = spsolve(mat, np.ones(m * m)).reshape(m, m)
    return a.astype(np.float32), u.astype(np.float32)


def main(steps=12, seed=1, deterministic=False):
    torch.manual_seed(seed)
    np.random.seed(seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if os.environ.get("TORCHLEAN_PROGRAMS_DEVICE"):
        device = torch.device(os.environ["TORCHLEAN_PROGRAMS_DEVICE"])

    ################################################################
    # configs
    ################################################################
    ntrain = 40
    ntest = 10

    batch_size = 10
    learning_rate = 0.005

    step_size = 2
    gamma = 0.5

    modes = 5
    width = 12

    s = 16

    ################################################################
    # load data and data normalization
    ################################################################
    a, u = darcy(ntrain + ntest, s, seed)
    x_train = torch.from_numpy(a[:ntrain])
    y_train = torch.from_numpy(u[:ntrain])
    x_test = torch.from_numpy(a[-ntest:])
    y_test = torch.from_numpy(u[-ntest:])

    x_normalizer = UnitGaussianNormalizer(x_train)
    x_train = x_normalizer.encode(x_train)
    x_test = x_normalizer.encode(x_test)

    y_normalizer = UnitGaussianNormalizer(y_train)
    y_train = y_normalizer.encode(y_train)

    x_train = x_train.reshape(ntrain, s, s, 1)
    x_test = x_test.reshape(ntest, s, s, 1)

    train_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x_train, y_train),
                                               batch_size=batch_size, shuffle=not deterministic)
    test_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x_test, y_test),
                                              batch_size=batch_size, shuffle=False)

    ################################################################
    # training and evaluation
    ################################################################
    model = FNO2d(modes, modes, width).to(device)
    if deterministic:
        np_init(model, seed)
    print(sum(p.numel() for p in model.parameters()))

    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=step_size, gamma=gamma)

    myloss = LpLoss(size_average=False)
    y_normalizer.to(device)
    losses = []
    ep = 0
    while len(losses) < steps:
        model.train()
        train_l2 = 0
        for x, y in train_loader:
            x, y = x.to(device), y.to(device)

            optimizer.zero_grad()
            out = model(x).reshape(batch_size, s, s)
            out = y_normalizer.decode(out)
            y = y_normalizer.decode(y)

            loss = myloss(out.view(batch_size, -1), y.view(batch_size, -1))
            loss.backward()

            optimizer.step()
            train_l2 += loss.item()
            losses.append(loss.item() / batch_size)
            if len(losses) == steps:
                break

        scheduler.step()

        model.eval()
        test_l2 = 0.0
        with torch.no_grad():
            for x, y in test_loader:
                x, y = x.to(device), y.to(device)

                out = model(x).reshape(batch_size, s, s)
                out = y_normalizer.decode(out)

                test_l2 += myloss(out.view(batch_size, -1), y.view(batch_size, -1)).item()

        train_l2 /= ntrain
        test_l2 /= ntest
        print(ep, train_l2, test_l2)
        ep += 1
    return losses


if __name__ == "__main__":
    cli(main, default_steps=12)
