"""DCGAN on 16x16 single-channel images: transposed-convolution generator, convolutional
discriminator, BCELoss and two Adam optimizers.

The "real" images are synthetic: bright squares at random positions.
"""

import os

if os.environ.get("TORCHLEAN_PROGRAMS_FRAMEWORK", "torchlean") == "torch":
    import torch
    import torch.nn as nn
    import torch.optim as optim
    import torch.utils.data
else:
    import torchlean as torch
    import torchlean.nn as nn
    import torchlean.optim as optim
    import torchlean.utils.data

import random

import numpy as np

from _common import cli, np_init, np_randn, np_rng

nc = 1      # channels in the images
nz = 16     # size of the latent vector
ngf = 16    # generator feature maps
ndf = 16    # discriminator feature maps


# custom weights initialization called on netG and netD
def weights_init(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        torch.nn.init.normal_(m.weight, 0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        torch.nn.init.normal_(m.weight, 1.0, 0.02)
        torch.nn.init.zeros_(m.bias)


class Generator(nn.Module):
    def __init__(self):
        super(Generator, self).__init__()
        self.main = nn.Sequential(
            # input is Z, going into a convolution
            nn.ConvTranspose2d(nz, ngf * 4, 4, 1, 0, bias=False),
            nn.BatchNorm2d(ngf * 4),
            nn.ReLU(True),
            # state size. (ngf*4) x 4 x 4
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            # state size. (ngf*2) x 8 x 8
            nn.ConvTranspose2d(ngf * 2, nc, 4, 2, 1, bias=False),
            nn.Tanh()
            # state size. (nc) x 16 x 16
        )

    def forward(self, input):
        return self.main(input)


class Discriminator(nn.Module):
    def __init__(self):
        super(Discriminator, self).__init__()
        self.main = nn.Sequential(
            # input is (nc) x 16 x 16
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf) x 8 x 8
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 2),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf*2) x 4 x 4
            nn.Conv2d(ndf * 2, 1, 4, 1, 0, bias=False),
            nn.Sigmoid()
        )

    def forward(self, input):
        output = self.main(input)
        return output.view(-1, 1).squeeze(1)


def squares(n, seed):
    rng = np_rng(seed, "squares")
    img = -np.ones((n, 1, 16, 16), dtype=np.float32)
    for k, (y, x) in enumerate(rng.integers(0, 11, size=(n, 2))):
        img[k, 0, y:y + 5, x:x + 5] = 1.0
    return img


def main(steps=12, seed=1, deterministic=False):
    random.seed(seed)
    torch.manual_seed(seed)
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    if os.environ.get("TORCHLEAN_PROGRAMS_DEVICE"):
        device = torch.device(os.environ["TORCHLEAN_PROGRAMS_DEVICE"])
    batch_size = 16

    dataset = torch.utils.data.TensorDataset(torch.from_numpy(squares(128, seed)))
    dataloader = torch.utils.data.DataLoader(dataset, batch_size=batch_size,
                                             shuffle=not deterministic, drop_last=True)

    netG = Generator().to(device)
    netG.apply(weights_init)
    netD = Discriminator().to(device)
    netD.apply(weights_init)
    if deterministic:
        np_init(netG, seed)
        np_init(netD, seed + 1)
        noise_rng = np_rng(seed, "noise")
    print(netG)

    criterion = nn.BCELoss()

    fixed_noise = torch.randn(batch_size, nz, 1, 1, device=device)
    real_label = 1.
    fake_label = 0.

    # setup optimizer
    optimizerD = optim.Adam(netD.parameters(), lr=0.0002, betas=(0.5, 0.999))
    optimizerG = optim.Adam(netG.parameters(), lr=0.0002, betas=(0.5, 0.999))

    losses = []
    epoch = 0
    while len(losses) < steps:
        for i, data in enumerate(dataloader, 0):
            ############################
            # (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
            ###########################
            # train with real
            netD.zero_grad()
            real_cpu = data[0].to(device)
            batch_size = real_cpu.size(0)
            label = torch.full((batch_size,), real_label, dtype=real_cpu.dtype, device=device)

            output = netD(real_cpu)
            errD_real = criterion(output, label)
            errD_real.backward()
            D_x = output.mean().item()

            # train with fake
            if deterministic:
                noise = np_randn(noise_rng, (batch_size, nz, 1, 1), device)
            else:
                noise = torch.randn(batch_size, nz, 1, 1, device=device)
            fake = netG(noise)
            label.fill_(fake_label)
            output = netD(fake.detach())
            errD_fake = criterion(output, label)
            errD_fake.backward()
            D_G_z1 = output.mean().item()
            errD = errD_real + errD_fake
            optimizerD.step()

            ############################
            # (2) Update G network: maximize log(D(G(z)))
            ###########################
            netG.zero_grad()
            label.fill_(real_label)  # fake labels are real for generator cost
            output = netD(fake)
            errG = criterion(output, label)
            errG.backward()
            D_G_z2 = output.mean().item()
            optimizerG.step()

            print("[%d][%d/%d] Loss_D: %.4f Loss_G: %.4f D(x): %.4f D(G(z)): %.4f / %.4f"
                  % (epoch, i, len(dataloader), errD.item(), errG.item(), D_x, D_G_z1, D_G_z2))
            # The discriminator's loss is the one that falls early in training.
            losses.append(errD.item())
            if len(losses) == steps:
                break
        epoch += 1

    netG.eval()
    with torch.no_grad():
        fake = netG(fixed_noise)
    print(f"fake images {list(fake.shape)} in [{fake.min().item():.3f}, {fake.max().item():.3f}]")
    return losses


if __name__ == "__main__":
    cli(main, default_steps=12)
