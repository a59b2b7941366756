// The smoke test's tiny kernel: one work-item stores `value` at `dst`. Its kernel arguments
// are 16 bytes (dst at 0, value at 8); `zinc smoke kfd` fills them and checks host-visible
// memory afterwards. Built for each gfx11 and gfx12 target by build.sh; the code objects in
// bin/ are committed so that a build of zinc never needs an AMDGPU compiler.
__kernel void zinc_write_value(__global ulong *dst, ulong value) {
    *dst = value;
}
