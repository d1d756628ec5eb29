"""Variational autoencoder on 28x28 images with a Bernoulli (BCE) reconstruction loss.

The images are synthetic (soft blobs at random places), values in [0, 1].
"""

import os

if os.environ.get("TORCHLEAN_PROGRAMS_FRAMEWORK", "torchlean") == "torch":
    import torch
    from torch import nn, optim
    from torch.nn import functional as F
    from torch.utils.data import DataLoader, TensorDataset
else:
    import torchlean as torch
    from torchlean import nn, optim
    from torchlean.nn import functional as F
    from torchlean.utils.data import DataLoader, TensorDataset

import numpy as np

from _common import cli, np_init, np_randn, np_randn_like, np_rng


class VAE(nn.Module):
    def __init__(self, hidden=128, latent=8):
        super(VAE, self).__init__()
        self.fc1 = nn.Linear(784, hidden)
        self.fc21 = nn.Linear(hidden, latent)
        self.fc22 = nn.Linear(hidden, latent)
        self.fc3 = nn.Linear(latent, hidden)
        self.fc4 = nn.Linear(hidden, 784)
        self.noise = None   # comparison mode: a function giving eps shaped like its argument

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std) if self.noise is None else self.noise(std)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 784))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


# Reconstruction + KL divergence losses summed over all elements and batch
def loss_function(recon_x, x, mu, logvar):
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction="sum")

    # see Appendix B from VAE paper:
    # Kingma and Welling. Auto-Encoding Variational Bayes. ICLR, 2014
    # 0.5 * sum(1 + log(sigma^2) - mu^2 - sigma^2)
    KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())

    return BCE + KLD


def blobs(n, seed):
    rng = np_rng(seed, "blobs")
    yy, xx = np.mgrid[0:28, 0:28]
    cy, cx = rng.uniform(6, 22, size=(2, n, 1, 1))
    r = rng.uniform(3, 6, size=(n, 1, 1))
    img = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r ** 2))
    return img[:, None].astype(np.float32)


def main(steps=15, seed=1, deterministic=False):
    torch.manual_seed(seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if os.environ.get("TORCHLEAN_PROGRAMS_DEVICE"):
        device = torch.device(os.environ["TORCHLEAN_PROGRAMS_DEVICE"])
    kwargs = {"num_workers": 0, "pin_memory": True} if device.type == "cuda" else {}

    data = torch.from_numpy(blobs(256, seed))
    train_loader = DataLoader(TensorDataset(data), batch_size=32, shuffle=not deterministic,
                              drop_last=True, **kwargs)

    model = VAE().to(device)
    if deterministic:
        np_init(model, seed)
        noise_rng = np_rng(seed, "eps")
        model.noise = lambda std: np_randn_like(noise_rng, std)
    optimizer = optim.Adam(model.parameters(), lr=1e-3)

    losses = []
    epoch = 0
    while len(losses) < steps:
        epoch += 1
        model.train()
        train_loss = 0
        for batch_idx, (data,) in enumerate(train_loader):
            data = data.to(device)
            optimizer.zero_grad()
            recon_batch, mu, logvar = model(data)
            loss = loss_function(recon_batch, data, mu, logvar)
            loss.backward()
            train_loss += loss.item()
            optimizer.step()
            losses.append(loss.item() / len(data))
            if batch_idx % 4 == 0:
                print(f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_loader.dataset)}]"
                      f"\tLoss: {loss.item() / len(data):.6f}")
            if len(losses) == steps:
                break
        print(f"====> Epoch: {epoch} Average loss: {train_loss / len(train_loader.dataset):.4f}")

    model.eval()
    with torch.no_grad():
        sample = np_randn(np_rng(seed, "sample"), (16, 8), device) if deterministic \
            else torch.randn(16, 8).to(device)
        sample = model.decode(sample).cpu()
        images = sample.view(16, 1, 28, 28)
        print(f"samples: {tuple(images.shape)}, mean {images.mean().item():.4f}")
    return losses


if __name__ == "__main__":
    cli(main, default_steps=15)
