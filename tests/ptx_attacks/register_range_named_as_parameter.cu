
extern "C" __global__ void k(unsigned long long *o, long long off){
  unsigned long long v;
  asm volatile("{\n\t.reg .b64 k_param_<1>;\n\tld.param.u64 k_param_0, [k_param_1];\n\tld.param.u64 %0, [k_param_0];\n\t}" : "=l"(v));
  o[0] = v;
}
