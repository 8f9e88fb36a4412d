import numpy as np

rng=np.random.default_rng(0)
def tf32(x):
    b=x.astype(np.float32).view(np.uint32)
    b=(b+0x1000)&0xFFFFE000  # round to 10 mantissa bits
    return b.view(np.float32)
def seq_fp32(A,B):
    M,K=A.shape; C=np.zeros((M,B.shape[1]),np.float32)
    for k in range(K): C=(C+ (A[:,k:k+1]*B[k:k+1,:]).astype(np.float32)).astype(np.float32)
    return C
for M,N,K in [(97,83,61),(256,256,1024),(128,128,4096)]:
    A=rng.uniform(-1,1,(M,K)).astype(np.float32); B=rng.uniform(-1,1,(K,N)).astype(np.float32)
    ref=A.astype(np.float64)@B.astype(np.float64)
    scale=np.sqrt(np.mean(ref**2))
    for name,C in [("seq32",seq_fp32(A,B)),("tf32",seq_fp32(tf32(A),tf32(B)))]:
        e=np.abs(C-ref)/(np.abs(ref)+scale)
        print(M,N,K,name,"max normerr %.3g"%e.max(), "eps*sqrtK %.3g"%(2**-24*np.sqrt(K)))
