// libFuzzer's entry for a program with its own main (libclang_rt.fuzzer_no_main, linked by Scripts/fuzz).
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));
