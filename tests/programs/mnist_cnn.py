"""MNIST-style CNN classifier: two convolutions, dropout, Adadelta and StepLR.

The digits are synthetic 28x28 images (a class-dependent stroke pattern plus noise), so the
program needs no download.
"""

import os

if os.environ.get("TORCHLEAN_PROGRAMS_FRAMEWORK", "torchlean") == "torch":
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import torch.optim as optim
    from torch.optim.lr_scheduler import StepLR
    from torch.utils.data import DataLoader, TensorDataset
else:
    import torchlean as torch
    import torchlean.nn as nn
    import torchlean.nn.functional as F
    import torchlean.optim as optim
    from torchlean.optim.lr_scheduler import StepLR
    from torchlean.utils.data import DataLoader, TensorDataset

import numpy as np

from _common import cli, np_init, np_rng


class Net(nn.Module):
    def __init__(self, dropout=0.25):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(2 * dropout)
        self.fc1 = nn.Linear(2304, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


def synthetic_digits(n, seed, split):
    templates = np_rng(seed, "digit templates").uniform(0.0, 1.0, size=(10, 28, 28)) > 0.8
    rng = np_rng(seed, split)
    labels = rng.integers(0, 10, size=n)
    images = 0.7 * templates[labels] + 0.3 * rng.uniform(0.0, 1.0, size=(n, 28, 28))
    images = (images - 0.1307) / 0.3081
    return images[:, None].astype(np.float32), labels.astype(np.int64)


def train(args, model, device, train_loader, optimizer, epoch, losses):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if batch_idx % args["log_interval"] == 0:
            print("Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}".format(
                epoch, batch_idx * len(data), len(train_loader.dataset),
                100. * batch_idx / len(train_loader), loss.item()))
        if len(losses) >= args["steps"]:
            return


def test(model, device, test_loader):
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()  # sum up batch loss
            pred = output.argmax(dim=1, keepdim=True)  # get the index of the max log-probability
            correct += pred.eq(target.view_as(pred)).sum().item()

    test_loss /= len(test_loader.dataset)
    print("\nTest set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\n".format(
        test_loss, correct, len(test_loader.dataset),
        100. * correct / len(test_loader.dataset)))


def main(steps=12, seed=1, deterministic=False):
    args = {"batch_size": 32, "test_batch_size": 64, "lr": 1.0, "gamma": 0.7, "log_interval": 2,
            "steps": steps}
    torch.manual_seed(seed)
    use_cuda = torch.cuda.is_available()
    device = torch.device("cuda" if use_cuda else "cpu")
    if os.environ.get("TORCHLEAN_PROGRAMS_DEVICE"):
        device = torch.device(os.environ["TORCHLEAN_PROGRAMS_DEVICE"])

    train_kwargs = {"batch_size": args["batch_size"], "shuffle": not deterministic}
    test_kwargs = {"batch_size": args["test_batch_size"]}
    if device.type == "cuda":
        cuda_kwargs = {"num_workers": 0, "pin_memory": True}
        train_kwargs.update(cuda_kwargs)
        test_kwargs.update(cuda_kwargs)

    x_train, y_train = synthetic_digits(128, seed, "train")
    x_test, y_test = synthetic_digits(64, seed, "test")
    dataset1 = TensorDataset(torch.from_numpy(x_train), torch.from_numpy(y_train))
    dataset2 = TensorDataset(torch.from_numpy(x_test), torch.from_numpy(y_test))
    train_loader = DataLoader(dataset1, **train_kwargs)
    test_loader = DataLoader(dataset2, **test_kwargs)

    model = Net(dropout=0.0 if deterministic else 0.25).to(device)
    if deterministic:
        np_init(model, seed)
    optimizer = optim.Adadelta(model.parameters(), lr=args["lr"])

    losses = []
    scheduler = StepLR(optimizer, step_size=1, gamma=args["gamma"])
    epoch = 1
    while len(losses) < steps:
        train(args, model, device, train_loader, optimizer, epoch, losses)
        test(model, device, test_loader)
        scheduler.step()
        epoch += 1
    return losses


if __name__ == "__main__":
    cli(main, default_steps=12)
