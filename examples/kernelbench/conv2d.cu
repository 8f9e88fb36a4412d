// conv2d_direct: out[b, o, y, x] = sum over c, i, j of x[b, c, y + i, x + j] * w[o, c, i, j],
// a 3x3 kernel, stride 1, no padding: out is batch_size x out_channels x (height - 2) x
// (width - 2), fp32, accumulated in fp32. One thread per output; a block's 32 x 8 outputs
// share one (b, o), so its threads read neighbouring x and the same weights.
// Launch: grid = (ceil_div(width - 2, 32), ceil_div(height - 2, 8), batch_size * out_channels),
//         block = (32, 8).
extern "C" __global__ void conv2d_direct(const float* __restrict__ x, const float* __restrict__ w,
                                         float* __restrict__ out, int batch_size, int in_channels,
                                         int height, int width, int out_channels)
{
    const int ow = width - 2, oh = height - 2;
    const int col = blockIdx.x * 32 + threadIdx.x, row = blockIdx.y * 8 + threadIdx.y;
    const int b = blockIdx.z / out_channels, o = blockIdx.z % out_channels;
    if (col >= ow || row >= oh || b >= batch_size) return;
    float acc = 0.0f;
    for (int c = 0; c < in_channels; ++c) {
        const float* xc = x + (((size_t)b * in_channels + c) * height + row) * width + col;
        const float* wc = w + ((size_t)o * in_channels + c) * 9;
#pragma unroll
        for (int i = 0; i < 3; ++i)
#pragma unroll
            for (int j = 0; j < 3; ++j) acc += xc[(size_t)i * width + j] * wc[i * 3 + j];
    }
    out[(((size_t)b * out_channels + o) * oh + row) * ow + col] = acc;
}
