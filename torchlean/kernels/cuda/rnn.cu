// Recurrent cells (launched by rnn.py): one step's element-wise math of an LSTM or a GRU, fused.
// Layout (batch B, k * hidden H) row-major, gates in PyTorch's order (LSTM i, f, g, o; GRU r, z, n).
// One thread per (b, j) element of the (B, H) state (grid-stride, j fastest: a warp reads
// consecutive columns of each gate block, coalesced). Each expression is the spec's
// (torchlean/spec/rnn.py), in its order; with --fmad=false every operation rounds once, as on the CPU.

#include "rnn_cell.cuh"

extern "C" __global__ void tl_lstm_cell_fwd(const float* __restrict__ gi, const float* __restrict__ gh,
                                            const float* __restrict__ cp, long long B, long long H,
                                            float* __restrict__ h, float* __restrict__ c,
                                            float* __restrict__ act) {
    for (long long k = TL_TID; k < B * H; k += TL_STRIDE) {
        const long long b = k / H, j = k - b * H;
        const long long g0 = b * 4 * H + j, a0 = b * 5 * H + j;
        const RnnLstmFwd r = rnn_lstm_fwd(gi[g0] + gh[g0], gi[g0 + H] + gh[g0 + H], gi[g0 + 2 * H] + gh[g0 + 2 * H],
                                          gi[g0 + 3 * H] + gh[g0 + 3 * H], cp[k]);
        c[k] = r.c;
        h[k] = r.h;
        act[a0] = r.i;
        act[a0 + H] = r.f;
        act[a0 + 2 * H] = r.g;
        act[a0 + 3 * H] = r.o;
        act[a0 + 4 * H] = r.tc;
    }
}

extern "C" __global__ void tl_lstm_cell_bwd(const float* __restrict__ act, const float* __restrict__ cp,
                                            const float* __restrict__ dh, const float* __restrict__ dc,
                                            long long B, long long H, float* __restrict__ dg,
                                            float* __restrict__ dcp) {
    for (long long k = TL_TID; k < B * H; k += TL_STRIDE) {
        const long long b = k / H, j = k - b * H;
        const long long g0 = b * 4 * H + j, a0 = b * 5 * H + j;
        const float i = act[a0], f = act[a0 + H], g = act[a0 + 2 * H], o = act[a0 + 3 * H], tc = act[a0 + 4 * H];
        const RnnLstmBwd r = rnn_lstm_bwd(i, f, g, o, tc, cp[k], dh[k], dc[k]);
        dg[g0] = r.di;
        dg[g0 + H] = r.df;
        dg[g0 + 2 * H] = r.dg;
        dg[g0 + 3 * H] = r.d_o;
        dcp[k] = r.dcp;
    }
}

extern "C" __global__ void tl_gru_cell_fwd(const float* __restrict__ gi, const float* __restrict__ gh,
                                           const float* __restrict__ hp, long long B, long long H,
                                           float* __restrict__ h, float* __restrict__ act) {
    for (long long k = TL_TID; k < B * H; k += TL_STRIDE) {
        const long long b = k / H, j = k - b * H;
        const long long g0 = b * 3 * H + j, a0 = b * 4 * H + j;
        const float r = rnn_sigmoid(gi[g0] + gh[g0]);
        const float z = rnn_sigmoid(gi[g0 + H] + gh[g0 + H]);
        const float ghn = gh[g0 + 2 * H];
        const float n = tanhf(gi[g0 + 2 * H] + r * ghn);
        h[k] = n + z * (hp[k] - n);
        act[a0] = r;
        act[a0 + H] = z;
        act[a0 + 2 * H] = n;
        act[a0 + 3 * H] = ghn;
    }
}

extern "C" __global__ void tl_gru_cell_bwd(const float* __restrict__ act, const float* __restrict__ hp,
                                           const float* __restrict__ dh, long long B, long long H,
                                           float* __restrict__ dgi, float* __restrict__ dgh,
                                           float* __restrict__ dhp) {
    for (long long k = TL_TID; k < B * H; k += TL_STRIDE) {
        const long long b = k / H, j = k - b * H;
        const long long g0 = b * 3 * H + j, a0 = b * 4 * H + j;
        const float r = act[a0], z = act[a0 + H], n = act[a0 + 2 * H], ghn = act[a0 + 3 * H];
        const float d = dh[k];
        const float dnp = (d * (1.f - z)) * (1.f - n * n);
        const float dz = (d * (hp[k] - n)) * (z * (1.f - z));
        const float dr = (dnp * ghn) * (r * (1.f - r));
        dgi[g0] = dr;
        dgi[g0 + H] = dz;
        dgi[g0 + 2 * H] = dnp;
        dgh[g0] = dr;
        dgh[g0 + H] = dz;
        dgh[g0 + 2 * H] = dnp * r;
        dhp[k] = d * z;
    }
}
