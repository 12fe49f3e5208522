"""A GCC precompiled header as a cc dependency (Bazel 4 has no rule for one).

`ps_pch(name, src, deps, copts)` compiles `src` with the C++ compile command line of the
current configuration (toolchain flags, --copt/--cxxopt, `copts`, the deps' includes and
defines) into `<name>.h.gch/`, next to a copy of the header named `<name>.h`. A target
that depends on it and has `-include <package>/<name>.h` in its copts loads the
precompiled form instead of parsing the headers again. GCC takes a precompiled header
only where the flags that matter agree (GCC manual, "Using Precompiled Headers"); where
they do not, it reads the header's text instead (slower, same object). Position-
independent code must agree too: `<name>.h.gch/` is a directory of variants, GCC uses
the one that fits: `pic` always, and `nopic` in `-c opt`, where this toolchain compiles
the objects of binaries without -fPIC (those of libraries built alone keep it). Each
output tree (plain and cuda share one; ubsan, asan and opt have their own) builds its own.

The precompile writes a dependency file, so GCC records the headers it read; users pass
-fpch-deps (PS_PCH_*_COPTS do) so their .d files list those headers, and Bazel
recompiles a user when one of them changes. Without both, a user's .d names neither the
.gch nor the headers inside it.
"""

load("@bazel_tools//tools/build_defs/cc:action_names.bzl", "CPP_COMPILE_ACTION_NAME")
load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")

def _compile_variables(ctx, cc_toolchain, features, deps_context, header, gch, deps_file, pic):
    """The variables of a C++ compile of `header` into `gch`, as cc_library's would be."""
    return cc_common.create_compile_variables(
        cc_toolchain = cc_toolchain,
        feature_configuration = features,
        source_file = header.path,
        output_file = gch.path,
        user_compile_flags = ctx.fragments.cpp.copts + ctx.fragments.cpp.cxxopts +
                             ctx.attr.copts + ["-x", "c++-header", "-MD", "-MF", deps_file.path],
        include_directories = deps_context.includes,
        quote_include_directories = depset(
            [".", ctx.genfiles_dir.path],
            transitive = [deps_context.quote_includes],
        ),
        system_include_directories = deps_context.system_includes,
        preprocessor_defines = deps_context.defines,
        use_pic = pic,
    )

def _precompile(ctx, cc_toolchain, features, deps_context, header, variant, pic):
    """Runs the compile of one variant; returns its .gch."""
    gch = ctx.actions.declare_file("%s.h.gch/%s" % (ctx.attr.name, variant))
    deps_file = ctx.actions.declare_file("%s_%s.d" % (ctx.attr.name, variant))
    variables = _compile_variables(ctx, cc_toolchain, features, deps_context, header, gch, deps_file, pic)
    ctx.actions.run(
        executable = cc_common.get_tool_for_action(
            feature_configuration = features,
            action_name = CPP_COMPILE_ACTION_NAME,
        ),
        arguments = cc_common.get_memory_inefficient_command_line(
            feature_configuration = features,
            action_name = CPP_COMPILE_ACTION_NAME,
            variables = variables,
        ),
        env = cc_common.get_environment_variables(
            feature_configuration = features,
            action_name = CPP_COMPILE_ACTION_NAME,
            variables = variables,
        ),
        inputs = depset([header], transitive = [deps_context.headers, cc_toolchain.all_files]),
        outputs = [gch, deps_file],
        mnemonic = "CppPch",
        progress_message = "Precompiling %s (%s)" % (header.short_path, variant),
    )
    return gch

def _ps_pch_impl(ctx):
    cc_toolchain = find_cpp_toolchain(ctx)
    features = cc_common.configure_features(
        ctx = ctx,
        cc_toolchain = cc_toolchain,
        requested_features = ctx.features,
        unsupported_features = ctx.disabled_features,
    )
    deps_info = cc_common.merge_cc_infos(cc_infos = [dep[CcInfo] for dep in ctx.attr.deps])
    header = ctx.actions.declare_file(ctx.attr.name + ".h")
    ctx.actions.expand_template(template = ctx.file.src, output = header, substitutions = {})
    variants = {"pic": True}
    if ctx.var["COMPILATION_MODE"] == "opt":
        variants["nopic"] = False
    outputs = [header] + [
        _precompile(ctx, cc_toolchain, features, deps_info.compilation_context, header, variant, pic)
        for variant, pic in variants.items()
    ]
    own = CcInfo(compilation_context = cc_common.create_compilation_context(
        headers = depset(outputs),
    ))
    return [
        DefaultInfo(files = depset(outputs)),
        cc_common.merge_cc_infos(direct_cc_infos = [own], cc_infos = [deps_info]),
    ]

ps_pch = rule(
    implementation = _ps_pch_impl,
    attrs = {
        "src": attr.label(allow_single_file = [".h"], mandatory = True),
        "deps": attr.label_list(providers = [CcInfo]),
        "copts": attr.string_list(),
        "_cc_toolchain": attr.label(
            default = Label("@bazel_tools//tools/cpp:current_cc_toolchain"),
        ),
    },
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
    fragments = ["cpp"],
    incompatible_use_toolchain_transition = True,
)
