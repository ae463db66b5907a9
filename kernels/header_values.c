/* The values of the header's pointer-cast macros, which bindgen drops: the tests compare the
 * hand-written constants of cuda-stream-sys with these. Plain C, compiled by the host compiler. */
#include <cuda_runtime_api.h>
#include <stdint.h>

const uintptr_t cs_header_stream_legacy = (uintptr_t)cudaStreamLegacy;
const uintptr_t cs_header_stream_per_thread = (uintptr_t)cudaStreamPerThread;
const int cs_header_cudart_version = CUDART_VERSION;
const unsigned cs_header_error_size = sizeof(cudaError_t);

/* The driver's result codes beside the runtime's codes of the same meaning: the crate reports a
 * driver call's CUresult under the runtime's number (cuda-stream/src/ffi/driver.rs), which is only
 * right while each pair agrees. The codes a stream, event, callback or graph-launch call can
 * return. */
#include <cuda.h>

const int cs_header_error_pairs[][2] = {
    {CUDA_ERROR_INVALID_VALUE, cudaErrorInvalidValue},
    {CUDA_ERROR_OUT_OF_MEMORY, cudaErrorMemoryAllocation},
    {CUDA_ERROR_NOT_INITIALIZED, cudaErrorInitializationError},
    {CUDA_ERROR_DEINITIALIZED, cudaErrorCudartUnloading},
    {CUDA_ERROR_NO_DEVICE, cudaErrorNoDevice},
    {CUDA_ERROR_INVALID_DEVICE, cudaErrorInvalidDevice},
    {CUDA_ERROR_INVALID_CONTEXT, cudaErrorDeviceUninitialized},
    {CUDA_ERROR_CONTEXT_IS_DESTROYED, cudaErrorContextIsDestroyed},
    {CUDA_ERROR_ECC_UNCORRECTABLE, cudaErrorECCUncorrectable},
    {CUDA_ERROR_INVALID_HANDLE, cudaErrorInvalidResourceHandle},
    {CUDA_ERROR_ILLEGAL_STATE, cudaErrorIllegalState},
    {CUDA_ERROR_NOT_FOUND, cudaErrorSymbolNotFound},
    {CUDA_ERROR_NOT_READY, cudaErrorNotReady},
    {CUDA_ERROR_ILLEGAL_ADDRESS, cudaErrorIllegalAddress},
    {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, cudaErrorLaunchOutOfResources},
    {CUDA_ERROR_LAUNCH_TIMEOUT, cudaErrorLaunchTimeout},
    {CUDA_ERROR_ASSERT, cudaErrorAssert},
    {CUDA_ERROR_HARDWARE_STACK_ERROR, cudaErrorHardwareStackError},
    {CUDA_ERROR_ILLEGAL_INSTRUCTION, cudaErrorIllegalInstruction},
    {CUDA_ERROR_MISALIGNED_ADDRESS, cudaErrorMisalignedAddress},
    {CUDA_ERROR_INVALID_ADDRESS_SPACE, cudaErrorInvalidAddressSpace},
    {CUDA_ERROR_INVALID_PC, cudaErrorInvalidPc},
    {CUDA_ERROR_LAUNCH_FAILED, cudaErrorLaunchFailure},
    {CUDA_ERROR_NOT_PERMITTED, cudaErrorNotPermitted},
    {CUDA_ERROR_NOT_SUPPORTED, cudaErrorNotSupported},
    {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cudaErrorStreamCaptureUnsupported},
    {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cudaErrorStreamCaptureInvalidated},
    {CUDA_ERROR_STREAM_CAPTURE_MERGE, cudaErrorStreamCaptureMerge},
    {CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, cudaErrorStreamCaptureUnmatched},
    {CUDA_ERROR_STREAM_CAPTURE_UNJOINED, cudaErrorStreamCaptureUnjoined},
    {CUDA_ERROR_STREAM_CAPTURE_ISOLATION, cudaErrorStreamCaptureIsolation},
    {CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, cudaErrorStreamCaptureImplicit},
    {CUDA_ERROR_CAPTURED_EVENT, cudaErrorCapturedEvent},
    {CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, cudaErrorStreamCaptureWrongThread},
    {CUDA_ERROR_UNKNOWN, cudaErrorUnknown},
};
const unsigned cs_header_error_pair_count = sizeof(cs_header_error_pairs) / sizeof(cs_header_error_pairs[0]);
