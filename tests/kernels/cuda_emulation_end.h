// Ends what cuda_emulation.h began: CUDA's keywords stop being macros (include it last).
#undef __global__
#undef __device__
#undef __forceinline__
#undef __launch_bounds__
#undef __shared__
