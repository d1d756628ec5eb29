"""Word-level language model: a two-layer LSTM with tied embeddings, truncated BPTT, plain SGD
written by hand with gradient clipping, and a save/reload of the model's state_dict.

The corpus is synthetic text from a small template grammar.
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

import math
import tempfile
import time

from _common import cli, np_init, np_rng


class Dictionary(object):
    def __init__(self):
        self.word2idx = {}
        self.idx2word = []

    def add_word(self, word):
        if word not in self.word2idx:
            self.idx2word.append(word)
            self.word2idx[word] = len(self.idx2word) - 1
        return self.word2idx[word]

    def __len__(self):
        return len(self.idx2word)


class Corpus(object):
    def __init__(self, lines):
        self.dictionary = Dictionary()
        n = len(lines)
        self.train = self.tokenize(lines[: n * 8 // 10])
        self.valid = self.tokenize(lines[n * 8 // 10:])

    def tokenize(self, lines):
        idss = []
        for line in lines:
            words = line.split() + ["<eos>"]
            ids = [self.dictionary.add_word(word) for word in words]
            idss.append(torch.tensor(ids).type(torch.int64))
        return torch.cat(idss)


def synthetic_lines(n, seed):
    rng = np_rng(seed, "corpus")
    subjects = ["the cat", "a dog", "the old man", "my sister", "the bird", "a child"]
    verbs = ["sees", "likes", "chases", "finds", "watches"]
    objects = ["the ball", "a red apple", "the river", "some bread", "the moon", "a small box"]
    tails = ["today", "again", "in the park", "at night", ""]
    lines = []
    for _ in range(n):
        s, v, o, t = (rng.integers(len(x)) for x in (subjects, verbs, objects, tails))
        lines.append(" ".join(w for w in (subjects[s], verbs[v], objects[o], tails[t]) if w))
    return lines


class RNNModel(nn.Module):
    """Container module with an encoder, a recurrent module, and a decoder."""

    def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=False):
        super(RNNModel, self).__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)

        # "Using the Output Embedding to Improve Language Models" (Press & Wolf 2016)
        if tie_weights:
            if nhid != ninp:
                raise ValueError("When using the tied flag, nhid must be equal to emsize")
            self.decoder.weight = self.encoder.weight

        self.init_weights()
        self.nhid = nhid
        self.nlayers = nlayers

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output)
        decoded = decoded.view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                weight.new_zeros(self.nlayers, bsz, self.nhid))


def batchify(data, bsz, device):
    # Work out how cleanly we can divide the dataset into bsz parts.
    nbatch = data.size(0) // bsz
    # Trim off any extra elements that wouldn't cleanly fit (remainders).
    data = data.narrow(0, 0, nbatch * bsz)
    # Evenly divide the data across the bsz batches.
    data = data.view(bsz, -1).t().contiguous()
    return data.to(device)


def repackage_hidden(h):
    """Wraps hidden states in new Tensors, to detach them from their history."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    else:
        return tuple(repackage_hidden(v) for v in h)


def get_batch(source, i, bptt):
    seq_len = min(bptt, len(source) - 1 - i)
    data = source[i:i + seq_len]
    target = source[i + 1:i + 1 + seq_len].view(-1)
    return data, target


def evaluate(model, criterion, data_source, bptt, eval_batch_size):
    # Turn on evaluation mode which disables dropout.
    model.eval()
    total_loss = 0.
    ntokens = model.ntoken
    hidden = model.init_hidden(eval_batch_size)
    with torch.no_grad():
        for i in range(0, data_source.size(0) - 1, bptt):
            data, targets = get_batch(data_source, i, bptt)
            output, hidden = model(data, hidden)
            hidden = repackage_hidden(hidden)
            total_loss += len(data) * criterion(output, targets).item()
    return total_loss / (len(data_source) - 1)


def main(steps=20, seed=1, deterministic=False):
    torch.manual_seed(seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if os.environ.get("TORCHLEAN_PROGRAMS_DEVICE"):
        device = torch.device(os.environ["TORCHLEAN_PROGRAMS_DEVICE"])
    bptt, batch_size, eval_batch_size, clip = 12, 8, 4, 0.25
    lr = 2.0

    corpus = Corpus(synthetic_lines(300, seed))
    train_data = batchify(corpus.train, batch_size, device)
    val_data = batchify(corpus.valid, eval_batch_size, device)

    ntokens = len(corpus.dictionary)
    model = RNNModel(ntokens, 32, 32, 2, dropout=0.0 if deterministic else 0.2,
                     tie_weights=True).to(device)
    if deterministic:
        np_init(model, seed)
    criterion = nn.NLLLoss()

    losses = []
    epoch = 0
    while len(losses) < steps:
        epoch += 1
        epoch_start_time = time.time()
        # Turn on training mode which enables dropout.
        model.train()
        hidden = model.init_hidden(batch_size)
        for batch, i in enumerate(range(0, train_data.size(0) - 1, bptt)):
            data, targets = get_batch(train_data, i, bptt)
            # Starting each batch, we detach the hidden state from how it was previously produced.
            # If we didn't, the model would try backpropagating all the way to start of the dataset.
            model.zero_grad()
            hidden = repackage_hidden(hidden)
            output, hidden = model(data, hidden)
            loss = criterion(output, targets)
            loss.backward()

            # `clip_grad_norm` helps prevent the exploding gradient problem in RNNs / LSTMs.
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-lr)

            losses.append(loss.item())
            if batch % 5 == 0:
                print(f"| epoch {epoch:3d} | {batch:5d}/{len(train_data) // bptt:5d} batches "
                      f"| lr {lr:02.2f} | loss {loss.item():5.2f} | ppl {math.exp(loss.item()):8.2f}")
            if len(losses) == steps:
                break
        val_loss = evaluate(model, criterion, val_data, bptt, eval_batch_size)
        print(f"| end of epoch {epoch:3d} | time: {time.time() - epoch_start_time:5.2f}s "
              f"| valid loss {val_loss:5.2f} | valid ppl {math.exp(val_loss):8.2f}")

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.pt")
        with open(path, "wb") as f:
            torch.save(model.state_dict(), f)

        # Load the saved model into a fresh one and check it computes what the trained one did.
        loaded = RNNModel(ntokens, 32, 32, 2, dropout=0.0, tie_weights=True).to(device)
        with open(path, "rb") as f:
            loaded.load_state_dict(torch.load(f, weights_only=True))
        loaded.rnn.flatten_parameters()
    reloaded_loss = evaluate(loaded, criterion, val_data, bptt, eval_batch_size)
    print(f"| End of training | reloaded valid loss {reloaded_loss:5.2f}")
    if abs(reloaded_loss - val_loss) > 1e-5 * max(1.0, abs(val_loss)):
        raise RuntimeError(f"reloaded model gives {reloaded_loss}, the trained one {val_loss}")
    return losses + [reloaded_loss]


if __name__ == "__main__":
    cli(main, default_steps=20)
