"""`cc_without_paths`: a C++ dependency that adds no flag to its dependents' compiles.

A cc_library of another repository puts `-iquote external/<repo>` (and its `includes`)
on the command line of every target above it, so switching it on in one configuration
(@local_cuda in --config=cuda) compiles the whole tree above it again. This rule passes
on its deps' headers (declared inputs: where a file does not use them, Bazel's action
cache does not count them) and their libraries, and no include path, define or quote
path. The few targets that include the headers name the path in their copts
(PS_CUDA_COPTS, third_party/copts.bzl).
"""

def _cc_without_paths_impl(ctx):
    merged = cc_common.merge_cc_infos(cc_infos = [dep[CcInfo] for dep in ctx.attr.deps])
    return [CcInfo(
        compilation_context = cc_common.create_compilation_context(
            headers = merged.compilation_context.headers,
        ),
        linking_context = merged.linking_context,
    )]

cc_without_paths = rule(
    implementation = _cc_without_paths_impl,
    attrs = {"deps": attr.label_list(providers = [CcInfo], mandatory = True)},
)
