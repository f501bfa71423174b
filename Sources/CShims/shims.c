// The shims are static inline functions in include/; this file gives the target a source.
