"""Fourier Neural Operator for 1-D Burgers-like data, written the way the reference
``fourier_1d.py`` (Li et al., ICLR 2021) is: SpectralConv1d with complex ``cfloat`` weights,
``torch.fft.rfft``, a complex ``torch.einsum``, slice assignment into a complex ``out_ft``,
``torch.fft.irfft(n=...)``, the grid appended to the input, 1x1 Conv1d, GELU, LpLoss with
``torch.norm`` and an MSE printed beside it, Adam with weight decay, StepLR.

The data: u0 is a random smooth periodic function, the target a smoothed nonlinear image of it,
u = exp(nu t Laplacian)(u0 + u0^2 / 2), computed with NumPy's FFT.
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

from _common import cli, np_init, np_rng


################################################################
#  1d fourier layer
################################################################
class SpectralConv1d(nn.Module):
    def __init__(self, in_channels, out_channels, modes1):
        super(SpectralConv1d, self).__init__()

        """
        1D Fourier layer. It does FFT, linear transform, and Inverse FFT.
        """

        self.in_channels = in_channels
        self.out_channels = out_channels
        self.modes1 = modes1  # Number of Fourier modes to multiply, at most floor(N/2) + 1

        self.scale = (1 / (in_channels * out_channels))
        self.weights1 = nn.Parameter(self.scale * torch.rand(in_channels, out_channels, self.modes1, dtype=torch.cfloat))

    # Complex multiplication
    def compl_mul1d(self, input, weights):
        # (batch, in_channel, x ), (in_channel, out_channel, x) -> (batch, out_channel, x)
        return torch.einsum("bix,iox->box", input, weights)

    def forward(self, x):
        batchsize = x.shape[0]
        # Compute Fourier coeffcients up to factor of e^(- something constant)
        x_ft = torch.fft.rfft(x)

        # Multiply relevant Fourier modes
        out_ft = torch.zeros(batchsize, self.out_channels, x.size(-1) // 2 + 1, device=x.device, dtype=torch.cfloat)
        out_ft[:, :, :self.modes1] = self.compl_mul1d(x_ft[:, :, :self.modes1], self.weights1)

        # Return to physical space
        x = torch.fft.irfft(out_ft, n=x.size(-1))
        return x


class FNO1d(nn.Module):
    def __init__(self, modes, width):
        super(FNO1d, self).__init__()

        """
        The overall network. It contains 4 layers of the Fourier layer.
        1. Lift the input to the desire channel dimension by self.fc0 .
        2. 4 layers of the integral operators u' = (W + K)(u).
            W defined by self.w; K defined by self.conv .
        3. Project from the channel space to the output space by self.fc1 and self.fc2 .

        input: the solution of the initial condition and location (a(x), x)
        input shape: (batchsize, x=s, c=2)
        output: the solution of a later timestep
        output shape: (batchsize, x=s, c=1)
        """

        self.modes1 = modes
        self.width = width
        self.padding = 2  # pad the domain if input is non-periodic
        self.fc0 = nn.Linear(2, self.width)  # input channel is 2: (a(x), x)

        self.conv0 = SpectralConv1d(self.width, self.width, self.modes1)
        self.conv1 = SpectralConv1d(self.width, self.width, self.modes1)
        self.conv2 = SpectralConv1d(self.width, self.width, self.modes1)
        self.conv3 = SpectralConv1d(self.width, self.width, self.modes1)
        self.w0 = nn.Conv1d(self.width, self.width, 1)
        self.w1 = nn.Conv1d(self.width, self.width, 1)
        self.w2 = nn.Conv1d(self.width, self.width, 1)
        self.w3 = nn.Conv1d(self.width, self.width, 1)

        self.fc1 = nn.Linear(self.width, 128)
        self.fc2 = nn.Linear(128, 1)

    def forward(self, x):
        grid = self.get_grid(x.shape, x.device)
        x = torch.cat((x, grid), dim=-1)
        x = self.fc0(x)
        x = x.permute(0, 2, 1)
        # x = F.pad(x, [0,self.padding]) # pad the domain if input is non-periodic

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

        # x = x[..., :-self.padding] # pad the domain if input is non-periodic
        x = x.permute(0, 2, 1)
        x = self.fc1(x)
        x = F.gelu(x)
        x = self.fc2(x)
        return x

    def get_grid(self, shape, device):
        batchsize, size_x = shape[0], shape[1]
        gridx = torch.tensor(np.linspace(0, 1, size_x), dtype=torch.float)
        gridx = gridx.reshape(1, size_x, 1).repeat([batchsize, 1, 1])
        return gridx.to(device)


################################################################
# utilities (the reference's utilities3.py)
################################################################
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
# data
################################################################
def burgers_like(n, s, seed):
    """n pairs (u0, u) on s points of [0, 1) (float32)."""
    rng = np_rng(seed, "u0")
    k = np.arange(s // 2 + 1)
    amp = np.where(k > 0, 1.0 / (1.0 + k) ** 2, 0.0) * s
    spec = amp * (rng.standard_normal((n, k.size)) + 1j * rng.standard_normal((n, k.size)))
    u0 = np.fft.irfft(spec, s)
    heat = np.exp(-0.002 * (2 * np.pi * k) ** 2)
    u = np.fft.irfft(heat * np.fft.rfft(u0 + 0.5 * u0 ** 2), s)
    return u0.astype(np.float32), u.astype(np.float32)


def main(steps=12, seed=1, deterministic=False):
    torch.manual_seed(seed)
    np.random.seed(seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if os.environ.get("TORCHLEAN_PROGRAMS_DEVICE"):
        device = torch.device(os.environ["TORCHLEAN_PROGRAMS_DEVICE"])

    ################################################################
    #  configurations
    ################################################################
    ntrain = 64
    ntest = 16

    sub = 2  # subsampling rate
    h = 128  # total grid size divided by the subsampling rate
    s = h // sub

    batch_size = 16
    learning_rate = 0.005

    step_size = 2
    gamma = 0.5

    modes = 8
    width = 16

    ################################################################
    # read data
    ################################################################
    x_data, y_data = burgers_like(ntrain + ntest, h, seed)
    x_data = torch.from_numpy(x_data)[:, ::sub]
    y_data = torch.from_numpy(y_data)[:, ::sub]

    x_train = x_data[:ntrain, :]
    y_train = y_data[:ntrain, :]
    x_test = x_data[-ntest:, :]
    y_test = y_data[-ntest:, :]

    x_train = x_train.reshape(ntrain, s, 1)
    x_test = x_test.reshape(ntest, s, 1)

    train_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x_train, y_train),
                                               batch_size=batch_size, shuffle=not deterministic)
    test_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x_test, y_test),
                                              batch_size=batch_size, shuffle=False)

    # model
    model = FNO1d(modes, width).to(device)
    if deterministic:
        np_init(model, seed)

    ################################################################
    # training and evaluation
    ################################################################
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=step_size, gamma=gamma)

    myloss = LpLoss(size_average=False)
    losses = []
    ep = 0
    while len(losses) < steps:
        model.train()
        train_mse = 0
        train_l2 = 0
        for x, y in train_loader:
            x, y = x.to(device), y.to(device)

            optimizer.zero_grad()
            out = model(x)

            mse = F.mse_loss(out.view(batch_size, -1), y.view(batch_size, -1), reduction='mean')
            l2 = myloss(out.view(batch_size, -1), y.view(batch_size, -1))
            l2.backward()  # use the l2 relative loss

            optimizer.step()
            train_mse += mse.item()
            train_l2 += l2.item()
            losses.append(l2.item() / batch_size)
            if len(losses) == steps:
                break

        scheduler.step()
        model.eval()
        test_l2 = 0.0
        with torch.no_grad():
            for x, y in test_loader:
                x, y = x.to(device), y.to(device)

                out = model(x)
                test_l2 += myloss(out.view(batch_size, -1), y.view(batch_size, -1)).item()

        train_mse /= len(train_loader)
        train_l2 /= ntrain
        test_l2 /= ntest

        print(ep, train_mse, train_l2, test_l2)
        ep += 1
    return losses


if __name__ == "__main__":
    cli(main, default_steps=12)
