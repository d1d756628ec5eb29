"""Character-level language model with a two-layer GRU (batch_first), trained on random chunks
of a synthetic text, then sampled with temperature and torch.multinomial.
"""

import os

if os.environ.get("TORCHLEAN_PROGRAMS_FRAMEWORK", "torchlean") == "torch":
    import torch
    import torch.nn as nn
else:
    import torchlean as torch
    import torchlean.nn as nn

import string
import time

from _common import cli, np_init, np_rng


def synthetic_text(seed, n_words=600):
    rng = np_rng(seed, "text")
    words = ["hello", "world", "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog"]
    return " ".join(words[i] for i in rng.integers(0, len(words), size=n_words)) + "\n"


class CharRNN(nn.Module):
    def __init__(self, input_size, hidden_size, output_size, n_layers=1, dropout=0.0):
        super(CharRNN, self).__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.output_size = output_size
        self.n_layers = n_layers

        self.encoder = nn.Embedding(input_size, hidden_size)
        self.rnn = nn.GRU(hidden_size, hidden_size, n_layers, batch_first=True, dropout=dropout)
        self.decoder = nn.Linear(hidden_size, output_size)

    def forward(self, input, hidden):
        encoded = self.encoder(input)
        output, hidden = self.rnn(encoded, hidden)
        output = self.decoder(output)
        return output, hidden

    def init_hidden(self, batch_size, device):
        return torch.zeros(self.n_layers, batch_size, self.hidden_size, device=device)


def char_tensor(s, stoi):
    tensor = torch.zeros(len(s)).long()
    for c in range(len(s)):
        tensor[c] = stoi[s[c]]
    return tensor


def random_training_set(data, chunk_len, batch_size, device, rng=None):
    if rng is None:
        starts = torch.randint(0, len(data) - chunk_len - 1, (batch_size,))
    else:
        starts = torch.from_numpy(rng.integers(0, len(data) - chunk_len - 1, size=batch_size))
    inp = torch.stack([data[s:s + chunk_len] for s in starts.tolist()])
    target = torch.stack([data[s + 1:s + 1 + chunk_len] for s in starts.tolist()])
    return inp.to(device), target.to(device)


def generate(model, stoi, itos, device, prime_str="th", predict_len=40, temperature=0.8):
    hidden = model.init_hidden(1, device)
    prime_input = char_tensor(prime_str, stoi).unsqueeze(0).to(device)
    predicted = prime_str

    # Use priming string to "build up" hidden state
    _, hidden = model(prime_input[:, :-1], hidden)
    inp = prime_input[:, -1:]

    for p in range(predict_len):
        output, hidden = model(inp, hidden)

        # Sample from the network as a multinomial distribution
        output_dist = output.data.view(-1).div(temperature).exp()
        top_i = torch.multinomial(output_dist, 1)[0]

        # Add predicted character to string and use as next input
        predicted_char = itos[top_i.item()]
        predicted += predicted_char
        inp = char_tensor(predicted_char, stoi).unsqueeze(0).to(device)

    return predicted


def main(steps=20, seed=1, deterministic=False):
    torch.manual_seed(seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if os.environ.get("TORCHLEAN_PROGRAMS_DEVICE"):
        device = torch.device(os.environ["TORCHLEAN_PROGRAMS_DEVICE"])

    text = synthetic_text(seed)
    chars = sorted(set(text) | set(string.ascii_lowercase))
    stoi = {ch: i for i, ch in enumerate(chars)}
    itos = {i: ch for i, ch in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    n_characters = len(chars)

    chunk_len, batch_size, hidden_size, n_layers = 24, 16, 48, 2
    decoder = CharRNN(n_characters, hidden_size, n_characters, n_layers,
                      dropout=0.0 if deterministic else 0.1).to(device)
    if deterministic:
        np_init(decoder, seed)
    batch_rng = np_rng(seed, "batches") if deterministic else None
    decoder_optimizer = torch.optim.Adam(decoder.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()

    start = time.time()
    losses = []
    for epoch in range(1, steps + 1):
        inp, target = random_training_set(data, chunk_len, batch_size, device, batch_rng)
        hidden = decoder.init_hidden(batch_size, device)
        decoder.zero_grad()
        output, hidden = decoder(inp, hidden)
        loss = criterion(output.reshape(-1, n_characters), target.reshape(-1))
        loss.backward()
        decoder_optimizer.step()
        losses.append(loss.item())

        if epoch % 5 == 0:
            print(f"[{time.time() - start:.1f}s ({epoch} {epoch / steps * 100:.0f}%) {loss:.4f}]")

    decoder.eval()
    with torch.no_grad():
        print(repr(generate(decoder, stoi, itos, device)))
    return losses


if __name__ == "__main__":
    cli(main, default_steps=20)
