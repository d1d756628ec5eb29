// The element-wise math of one recurrent-cell step, shared by rnn.cu (one launch per primitive)
// and rnn_seq.cu (the fused LSTM recurrence): each expression is the spec's (torchlean/spec/rnn.py),
// in its order; with --fmad=false every operation rounds once, as on the CPU, so both files give
// the same bits for the same inputs.

__device__ __forceinline__ float rnn_sigmoid(float x) {
    float e = expf(-fabsf(x));                  // in (0, 1]: never overflows
    float num = x >= 0.f ? 1.f : e;             // NaN: x >= 0 is false, e is NaN
    return __fdividef(num, 1.f + e);            // divisor in [1, 2]: within 2 ulp (contract: 16u)
}

// LSTM forward from the gate pre-activations a = gi + gh (i, f, g, o) and c_prev: the act row
// [i, f, g, o, tanh(c)], the new c, and h = o tanh(c).
struct RnnLstmFwd {
    float i, f, g, o, c, tc, h;
};

__device__ __forceinline__ RnnLstmFwd rnn_lstm_fwd(float ai, float af, float ag, float ao, float cp) {
    RnnLstmFwd r;
    r.i = rnn_sigmoid(ai);
    r.f = rnn_sigmoid(af);
    r.g = tanhf(ag);
    r.o = rnn_sigmoid(ao);
    r.c = r.f * cp + r.i * r.g;
    r.tc = tanhf(r.c);
    r.h = r.o * r.tc;
    return r;
}

// LSTM backward of one element: from act (i, f, g, o, tc), c_prev, dh and dc, the gate gradients
// (d_i, d_f, d_g, d_o: dgates = dgi = dgh) and dc_prev.
struct RnnLstmBwd {
    float di, df, dg, d_o, dcp;
};

__device__ __forceinline__ RnnLstmBwd rnn_lstm_bwd(float i, float f, float g, float o, float tc, float cp,
                                                   float d, float dc) {
    RnnLstmBwd r;
    const float dcs = dc + (d * o) * (1.f - tc * tc);
    const float d_o = d * tc;
    r.di = (dcs * g) * (i * (1.f - i));
    r.df = (dcs * cp) * (f * (1.f - f));
    r.dg = (dcs * i) * (1.f - g * g);
    r.d_o = d_o * (o * (1.f - o));
    r.dcp = dcs * f;
    return r;
}
