//! Building what the tests run: the shim, the fake CUDA runtimes and
//! drivers from `tests/fake/`, and the C clients from `tests/clients/`, once
//! per test binary.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The repository's `tests/` folder.
pub fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests")
}

/// The shim under test: cargo builds its cdylib next to the test binaries
/// before it runs them, for the shim's own tests (the package's library) and
/// for the command's (vramshare-cli has the shim as a dev-dependency for just
/// this reason), so it is built from the current source in either case.
pub fn shim_library() -> PathBuf {
    built_library("libvramshare.so")
}

/// A library of the workspace that cargo built beside the test binaries
/// (the package under test depends on its crate for that).
pub fn built_library(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let path = exe.parent().unwrap().join(name);
    assert!(
        path.exists(),
        "{} is missing: build with cargo test from the workspace",
        path.display()
    );
    path
}

pub fn cc(args: &[&str]) {
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let output = Command::new(&compiler)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {compiler}: {e}"));
    assert!(
        output.status.success(),
        "{compiler} {args:?} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A CUDA runtime for the clients: one of the fakes, or NVIDIA's real one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runtime {
    Fake13,
    Fake12,
}

/// Where this test binary keeps what it compiled (one folder per binary, so
/// that binaries running at once never build into each other's files).
fn build_root() -> PathBuf {
    let root =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("c-{}", env!("CARGO_CRATE_NAME")));
    std::fs::create_dir_all(&root).unwrap();
    root
}

/// Builds the clients in `dir` against the `libcudart.so` found there.
pub fn build_clients(dir: &Path) {
    // The fake cuBLASLt beside a fake runtime; none beside a real one.
    let (flags, libs): (&[&str], &[&str]) = if dir.join("libcublasLt.so").exists() {
        (&[], &["-lcublasLt", "-lcudart", "-lpthread", "-ldl"])
    } else {
        (&["-DNO_CUBLASLT"], &["-lcudart", "-lpthread", "-ldl"])
    };
    for client in ["client", "stress"] {
        program(dir, client, flags, libs);
    }
}

/// Builds `tests/clients/NAME.c` into `dir/NAME`, linked against the
/// libraries in `dir` with `libs`.
pub fn program(dir: &Path, name: &str, flags: &[&str], libs: &[&str]) {
    program_as(dir, name, name, flags, libs);
}

/// The same, from `tests/clients/SOURCE.c` into `dir/OUTPUT`.
pub fn program_as(dir: &Path, source: &str, output: &str, flags: &[&str], libs: &[&str]) {
    let source = tests_dir().join(format!("clients/{source}.c"));
    let out = dir.join(output);
    let include = format!("-I{}", tests_dir().join("clients").display());
    let lib_dir = format!("-L{}", dir.display());
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    let mut args = vec![
        "-O1",
        "-o",
        out.to_str().unwrap(),
        source.to_str().unwrap(),
        &include,
        &lib_dir,
        &rpath,
    ];
    args.extend_from_slice(flags);
    args.extend_from_slice(libs);
    cc(&args);
}

/// Builds a fake runtime (with NVIDIA's symbol version node) and the clients
/// linked against it, once per test binary.
pub fn fake_dir(runtime: Runtime) -> &'static Path {
    static BUILT: OnceLock<HashMap<u32, PathBuf>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let mut dirs = HashMap::new();
        for major in [12u32, 13] {
            let dir = build_root().join(format!("fake{major}"));
            std::fs::create_dir_all(&dir).unwrap();
            let soname = format!("libcudart.so.{major}");
            let script = dir.join("cudart.map");
            std::fs::write(
                &script,
                format!("{soname} {{ global: cuda*; __cuda*; local: *; }};\n"),
            )
            .unwrap();
            let library = dir.join(&soname);
            cc(&[
                "-O1",
                "-shared",
                "-fPIC",
                &format!("-DFAKE_CUDA_MAJOR={major}"),
                "-o",
                library.to_str().unwrap(),
                tests_dir().join("fake/cudart.c").to_str().unwrap(),
                &format!("-Wl,-soname,{soname}"),
                &format!("-Wl,--version-script,{}", script.display()),
                "-lpthread",
            ]);
            let link = dir.join("libcudart.so");
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(&soname, &link).unwrap();
            // A fake cuBLASLt over it.
            let cublaslt = dir.join(format!("libcublasLt.so.{major}"));
            cc(&[
                "-O1",
                "-shared",
                "-fPIC",
                "-o",
                cublaslt.to_str().unwrap(),
                tests_dir().join("fake/cublaslt.c").to_str().unwrap(),
                &format!("-Wl,-soname,libcublasLt.so.{major}"),
                &format!("-L{}", dir.display()),
                "-lcudart",
            ]);
            let link = dir.join("libcublasLt.so");
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(cublaslt.file_name().unwrap(), &link).unwrap();
            // A fake cuDNN, in its two parts (loaded by the client at run time).
            for (file, flags) in [
                ("libcudnn_graph.so.9", "-DGRAPH"),
                ("libcudnn.so.9", "-UGRAPH"),
            ] {
                cc(&[
                    "-O1",
                    "-shared",
                    "-fPIC",
                    flags,
                    "-o",
                    dir.join(file).to_str().unwrap(),
                    tests_dir().join("fake/cudnn.c").to_str().unwrap(),
                    &format!("-Wl,-soname,{file}"),
                    &format!("-L{}", dir.display()),
                    &format!("-Wl,-rpath,{}", dir.display()),
                    "-lcudart",
                    "-ldl",
                ]);
            }
            // The fake driver beside it, and a client of the driver API.
            let driver = dir.join("libcuda.so.1");
            cc(&[
                "-O1",
                "-shared",
                "-fPIC",
                "-o",
                driver.to_str().unwrap(),
                tests_dir().join("fake/cuda.c").to_str().unwrap(),
                "-Wl,-soname,libcuda.so.1",
                "-lpthread",
                "-ldl",
            ]);
            let link = dir.join("libcuda.so");
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink("libcuda.so.1", &link).unwrap();
            build_clients(&dir);
            program(&dir, "driver_client", &[], &["-lcuda", "-lcudart"]);
            program_as(
                &dir,
                "driver_client",
                "driver_only_client",
                &["-DDRIVER_ONLY"],
                &["-lcuda"],
            );
            // A program that finds CUDA through dlopen and dlsym, with an
            // RTLD_NEXT interposer of getpid linked in.
            program_as(
                &dir,
                "getpid_wrap",
                "libgetpid_wrap.so",
                &["-shared", "-fPIC"],
                &["-ldl"],
            );
            program(&dir, "dlsym_client", &[], &["-lgetpid_wrap", "-ldl"]);
            program_as(
                &dir,
                "dlsym_client",
                "dlsym_client_old_glibc",
                &["-DOLD_GLIBC_DLSYM"],
                &["-lgetpid_wrap", "-ldl"],
            );
            dirs.insert(major, dir);
        }
        dirs
    });
    match runtime {
        Runtime::Fake13 => &built[&13],
        Runtime::Fake12 => &built[&12],
    }
}
