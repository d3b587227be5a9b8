//! Derives the module's integer version from the Cargo version (major*10000 + minor*100 +
//! patch, as MODULE LIST shows it) and stamps the git revision for `INFO seckill`.

use std::process::Command;

fn main() {
    let version = std::env::var("CARGO_PKG_VERSION").expect("CARGO_PKG_VERSION");
    let parts: Vec<u32> = version
        .split(['.', '-', '+'])
        .take(3)
        .map(|part| part.parse().expect("numeric major.minor.patch"))
        .collect();
    let [major, minor, patch] = parts[..] else {
        panic!("version {version} is not major.minor.patch");
    };
    assert!(
        minor < 100 && patch < 100,
        "minor and patch must stay below 100"
    );
    let module_version = major * 10_000 + minor * 100 + patch;

    let revision = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());

    let out_dir = std::env::var("OUT_DIR").expect("OUT_DIR");
    std::fs::write(
        format!("{out_dir}/build_info.rs"),
        format!(
            "/// Integer module version derived from Cargo.toml.\n\
             pub const MODULE_VERSION: i32 = {module_version};\n\
             /// Git revision the module was built from.\n\
             pub const GIT_REVISION: &str = {revision:?};\n"
        ),
    )
    .expect("write build_info.rs");
    // The revision's files, where git keeps them: in a worktree `.git` is a file, and a path
    // that does not exist has cargo run this script, and build the module, at every call.
    for name in ["HEAD", "refs/heads", "packed-refs"] {
        if let Some(path) = git(&["rev-parse", "--git-path", name])
            && std::path::Path::new(&path).exists()
        {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}

/// `git args`' output, trimmed; `None` without git or outside a repository.
fn git(args: &[&str]) -> Option<String> {
    Command::new("git")
        .args(args)
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
}
