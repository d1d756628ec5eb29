"""Vision Transformer: Conv2d patch embedding, a class token and a learned positional embedding
(nn.Parameter, truncated-normal init), a pre-norm nn.TransformerEncoder, AdamW with a
LambdaLR warmup, label smoothing and gradient clipping.

The images are synthetic 3x16x16 pictures: a bright square whose colour
(red, green, blue or white) is the class.
"""

import os

if os.environ.get("TORCHLEAN_PROGRAMS_FRAMEWORK", "torchlean") == "torch":
    import torch
    from torch import nn
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset
else:
    import torchlean as torch
    from torchlean import nn
    import torchlean.nn.functional as F
    from torchlean.utils.data import DataLoader, TensorDataset

import numpy as np

from _common import cli, np_init, np_rng


class PatchEmbed(nn.Module):
    """ Image to Patch Embedding """

    def __init__(self, img_size=16, patch_size=4, in_chans=3, embed_dim=48):
        super().__init__()
        self.num_patches = (img_size // patch_size) ** 2
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        x = self.proj(x)                      # B, C, H', W'
        return x.flatten(2).transpose(1, 2)   # B, N, C


class ViT(nn.Module):
    def __init__(self, img_size=16, patch_size=4, in_chans=3, num_classes=4, embed_dim=48, depth=2,
                 num_heads=4, mlp_ratio=2.0, dropout=0.1):
        super().__init__()
        self.patch_embed = PatchEmbed(img_size, patch_size, in_chans, embed_dim)
        num_patches = self.patch_embed.num_patches

        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, embed_dim))
        self.pos_drop = nn.Dropout(p=dropout)

        encoder_layer = nn.TransformerEncoderLayer(
            d_model=embed_dim, nhead=num_heads, dim_feedforward=int(embed_dim * mlp_ratio),
            dropout=dropout, activation="gelu", batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(encoder_layer, num_layers=depth)
        self.norm = nn.LayerNorm(embed_dim, eps=1e-6)
        self.head = nn.Linear(embed_dim, num_classes)

        nn.init.trunc_normal_(self.pos_embed, std=.02)
        nn.init.trunc_normal_(self.cls_token, std=.02)
        self.apply(self._init_weights)

    def _init_weights(self, m):
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=.02)
            if m.bias is not None:
                nn.init.constant_(m.bias, 0)
        elif isinstance(m, nn.LayerNorm):
            nn.init.constant_(m.bias, 0)
            nn.init.constant_(m.weight, 1.0)

    def forward(self, x):
        B = x.shape[0]
        x = self.patch_embed(x)

        cls_tokens = self.cls_token.expand(B, -1, -1)  # stole cls_tokens impl from Phil Wang, thanks
        x = torch.cat((cls_tokens, x), dim=1)
        x = x + self.pos_embed
        x = self.pos_drop(x)

        x = self.encoder(x)
        x = self.norm(x)
        return self.head(x[:, 0])


def quadrant_images(n, seed):
    rng = np_rng(seed, "images")
    labels = rng.integers(0, 4, size=n)
    img = 0.1 * rng.standard_normal(size=(n, 3, 16, 16))
    for k, c in enumerate(labels):
        y0, x0 = rng.integers(0, 12, size=2)
        channels = slice(None) if c == 3 else slice(c, c + 1)
        img[k, channels, y0:y0 + 4, x0:x0 + 4] += 1.0
    return img.astype(np.float32), labels.astype(np.int64)


def main(steps=15, seed=1, deterministic=False):
    torch.manual_seed(seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if os.environ.get("TORCHLEAN_PROGRAMS_DEVICE"):
        device = torch.device(os.environ["TORCHLEAN_PROGRAMS_DEVICE"])

    x, y = quadrant_images(256, seed)
    dataset = TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    loader = DataLoader(dataset, batch_size=32, shuffle=not deterministic, drop_last=True)

    model = ViT(dropout=0.0 if deterministic else 0.1)
    if deterministic:
        np_init(model, seed)
    model = model.to(device)
    print(f"params: {sum(p.numel() for p in model.parameters() if p.requires_grad):,}")

    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.05)
    warmup = 3
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))

    losses = []
    epoch = 0
    while len(losses) < steps:
        model.train()
        for images, labels in loader:
            images, labels = images.to(device), labels.to(device)
            logits = model(images)
            loss = criterion(logits, labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
            optimizer.step()
            scheduler.step()
            losses.append(loss.item())
            acc = (logits.argmax(dim=-1) == labels).float().mean()
            print(f"epoch {epoch} step {len(losses)}: loss {loss.item():.4f} acc {acc:.3f}")
            if len(losses) == steps:
                break
        epoch += 1

    model.eval()
    with torch.no_grad():
        xt, yt = quadrant_images(64, seed + 1)
        pred = model(torch.from_numpy(xt).to(device)).argmax(-1).cpu()
        print(f"held-out accuracy {(pred == torch.from_numpy(yt)).float().mean().item():.3f}")
    return losses


if __name__ == "__main__":
    cli(main, default_steps=15)
