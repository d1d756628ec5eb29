"""ResNet for CIFAR-sized (3x32x32) images: BasicBlock with BatchNorm and a projection
shortcut, SGD with momentum, Nesterov and weight decay, CosineAnnealingLR, random-crop and
horizontal-flip augmentation done on tensors.

The images are synthetic: ten classes of coloured stripe patterns plus noise.
"""

import os

if os.environ.get("TORCHLEAN_PROGRAMS_FRAMEWORK", "torchlean") == "torch":
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import torch.optim as optim
else:
    import torchlean as torch
    import torchlean.nn as nn
    import torchlean.nn.functional as F
    import torchlean.optim as optim

import numpy as np

from _common import cli, np_init, np_rng


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes, planes, stride=1):
        super(BasicBlock, self).__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)

        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != self.expansion * planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, self.expansion * planes, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(self.expansion * planes)
            )

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += self.shortcut(x)
        out = F.relu(out)
        return out


class ResNet(nn.Module):
    def __init__(self, block, num_blocks, num_classes=10, width=8):
        super(ResNet, self).__init__()
        self.in_planes = width

        self.conv1 = nn.Conv2d(3, width, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.layer1 = self._make_layer(block, width, num_blocks[0], stride=1)
        self.layer2 = self._make_layer(block, 2 * width, num_blocks[1], stride=2)
        self.layer3 = self._make_layer(block, 4 * width, num_blocks[2], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.linear = nn.Linear(4 * width * block.expansion, num_classes)

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, block, planes, num_blocks, stride):
        strides = [stride] + [1] * (num_blocks - 1)
        layers = []
        for stride in strides:
            layers.append(block(self.in_planes, planes, stride))
            self.in_planes = planes * block.expansion
        return nn.Sequential(*layers)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer1(out)
        out = self.layer2(out)
        out = self.layer3(out)
        out = self.avgpool(out)
        out = out.view(out.size(0), -1)
        out = self.linear(out)
        return out


def ResNet8():
    return ResNet(BasicBlock, [1, 1, 1])


def synthetic_cifar(n, seed, split):
    freqs = np_rng(seed, "class patterns").uniform(0.2, 1.2, size=(10, 3, 2))
    rng = np_rng(seed, split)
    labels = rng.integers(0, 10, size=n)
    yy, xx = np.mgrid[0:32, 0:32]
    f = freqs[labels]                                              # (n, 3, 2)
    img = 0.5 + 0.4 * np.sin(f[..., 0, None, None] * yy + f[..., 1, None, None] * xx)
    img = img + 0.1 * rng.standard_normal(size=(n, 3, 32, 32))
    return img.astype(np.float32), labels.astype(np.int64)


def augment(x, rng=None):
    """Random crop with 4 pixels of zero padding and a random horizontal flip, on the batch."""
    n = x.size(0)
    if rng is None:
        i, j = torch.randint(0, 9, (2,)).tolist()
        flip = torch.rand(n, device=x.device) < 0.5
    else:
        i, j = rng.integers(0, 9, size=2).tolist()
        flip = torch.from_numpy(rng.uniform(size=n) < 0.5).to(x.device)
    x = F.pad(x, (4, 4, 4, 4))[:, :, i:i + 32, j:j + 32]
    return torch.where(flip[:, None, None, None], x.flip(3), x)


def main(steps=12, seed=1, deterministic=False):
    torch.manual_seed(seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    device = os.environ.get("TORCHLEAN_PROGRAMS_DEVICE") or device

    mean = torch.tensor([0.4914, 0.4822, 0.4465]).view(1, 3, 1, 1).to(device)
    std = torch.tensor([0.2470, 0.2435, 0.2616]).view(1, 3, 1, 1).to(device)
    x_train, y_train = synthetic_cifar(128, seed, "train")
    x_test, y_test = synthetic_cifar(64, seed, "test")
    trainset = torch.utils.data.TensorDataset(torch.from_numpy(x_train), torch.from_numpy(y_train))
    trainloader = torch.utils.data.DataLoader(trainset, batch_size=16, shuffle=not deterministic,
                                              num_workers=0)
    rng = np_rng(seed, "augment") if deterministic else None

    print("==> Building model..")
    net = ResNet8()
    if deterministic:
        np_init(net, seed)
    net = net.to(device)

    criterion = nn.CrossEntropyLoss()
    optimizer = optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4, nesterov=True)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)

    losses = []
    epoch = 0
    while len(losses) < steps:
        print("\nEpoch: %d" % epoch)
        net.train()
        train_loss = 0
        correct = 0
        total = 0
        for batch_idx, (inputs, targets) in enumerate(trainloader):
            inputs, targets = inputs.to(device), targets.to(device)
            inputs = (augment(inputs, rng) - mean) / std
            optimizer.zero_grad()
            outputs = net(inputs)
            loss = criterion(outputs, targets)
            loss.backward()
            optimizer.step()
            scheduler.step()

            train_loss += loss.item()
            _, predicted = outputs.max(1)
            total += targets.size(0)
            correct += predicted.eq(targets).sum().item()
            losses.append(loss.item())
            print("%d/%d Loss: %.3f | Acc: %.3f%% (%d/%d) | lr %.4f"
                  % (batch_idx, len(trainloader), train_loss / (batch_idx + 1), 100. * correct / total,
                     correct, total, scheduler.get_last_lr()[0]))
            if len(losses) == steps:
                break
        epoch += 1

    net.eval()
    with torch.no_grad():
        inputs = (torch.from_numpy(x_test).to(device) - mean) / std
        targets = torch.from_numpy(y_test).to(device)
        acc = (net(inputs).argmax(1) == targets).float().mean().item()
    print(f"test accuracy {acc:.3f}")
    return losses


if __name__ == "__main__":
    cli(main, default_steps=12)
