
struct __align__(16) S { unsigned long long a, b; };
extern "C" __global__ void k(unsigned long long *o, S s){
  unsigned long long lo, hi;
  asm volatile("{\n\t.reg .b128 q;\n\tld.param.b128 q, [k_param_1+8];\n\tmov.b128 {%0, %1}, q;\n\t}" : "=l"(lo), "=l"(hi));
  o[0] = lo; o[1] = hi; o[2] = s.a;
}
