// maxpool2d_4x4: out[b, c, y, x] = max of the 4x4 window of x[b, c] whose top-left corner is
// (y - 1, x - 1) (stride 1, padding 1: positions outside the input are skipped, as
// nn.MaxPool2d pads with -inf). out is batch_size x channels x (height - 1) x (width - 1), fp32.
// One thread per output; a row of a block reads neighbouring x.
// Launch: grid = (ceil_div(width - 1, 32), ceil_div(height - 1, 8), batch_size * channels),
//         block = (32, 8).
extern "C" __global__ void maxpool2d_4x4(const float* __restrict__ x, float* __restrict__ out,
                                         int batch_size, int channels, int height, int width)
{
    const int ow = width - 1, oh = height - 1;
    const int col = blockIdx.x * 32 + threadIdx.x, row = blockIdx.y * 8 + threadIdx.y;
    const size_t plane = blockIdx.z;
    if (col >= ow || row >= oh || plane >= (size_t)batch_size * channels) return;
    const float* xp = x + plane * height * width;
    float m = __int_as_float(0xff800000);  // -inf
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int y = row - 1 + i;
        if (y < 0 || y >= height) continue;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int xx = col - 1 + j;
            if (xx >= 0 && xx < width) m = fmaxf(m, xp[(size_t)y * width + xx]);
        }
    }
    out[plane * oh * ow + (size_t)row * ow + col] = m;
}
