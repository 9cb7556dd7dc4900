//! Paths as the code inside every sandbox sees them: the home directory (the writable scratch),
//! which directories a context may work in, and how a caller's file path maps into the home.

use waxell::sandbox::SandboxError;

/// The sandbox user's home: the writable scratch directory, and where relative paths point.
pub(crate) const HOME_DIR: &str = "/home/user";

/// A context may work in any directory of the sandbox, named by a clean absolute path (E2B's may).
/// Its kernel makes it when it is missing and the sandbox user may (in the home directory or /tmp,
/// the only writable places), else the context is refused with the reason.
pub(crate) fn check_context_cwd(cwd: &str) -> Result<(), SandboxError> {
    let invalid = |why: &str| Err(SandboxError::InvalidArgument(format!("cwd {cwd:?}: {why}")));
    if !cwd.starts_with('/') {
        return invalid("must be an absolute path");
    }
    if cwd.contains('\0') {
        return invalid("contains a NUL byte");
    }
    if cwd.split('/').any(|part| part == "..") {
        return invalid("`..` is not allowed");
    }
    Ok(())
}

/// The absolute in-sandbox path for a caller's path: relative paths are inside `/home/user`;
/// absolute ones must be below it; `..`, NUL bytes and other absolute paths are refused.
pub(crate) fn sandbox_path(path: &str) -> Result<String, SandboxError> {
    let invalid = |reason: &str| SandboxError::InvalidPath {
        path: path.to_owned(),
        reason: reason.to_owned(),
    };
    let rel = if let Some(rest) = path.strip_prefix(HOME_DIR) {
        if !(rest.is_empty() || rest.starts_with('/')) {
            return Err(invalid("only paths inside /home/user are accessible"));
        }
        rest
    } else if path.starts_with('/') {
        return Err(invalid("only paths inside /home/user are accessible"));
    } else {
        path
    };
    join_clean(String::from(HOME_DIR), rel, path)
}

/// `base` followed by the components of `rel`, `.` and empty ones dropped; `..` and NUL bytes are
/// refused, naming the caller's `path`.
fn join_clean(mut clean: String, rel: &str, path: &str) -> Result<String, SandboxError> {
    let invalid = |reason: &str| SandboxError::InvalidPath {
        path: path.to_owned(),
        reason: reason.to_owned(),
    };
    for part in rel.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(invalid("`..` is not allowed")),
            part if part.contains('\0') => return Err(invalid("contains a NUL byte")),
            part => {
                clean.push('/');
                clean.push_str(part);
            }
        }
    }
    Ok(clean)
}

/// An absolute path outside `/home/user`, cleaned (`.` and repeated slashes dropped), which the
/// file API reads from inside the sandbox as its user (`/etc/os-release`, `/proc/...`); `None` for
/// a path in the home directory (relative paths are). `..` and NUL bytes are refused.
pub(crate) fn outside_home(path: &str) -> Result<Option<String>, SandboxError> {
    if !path.starts_with('/') || path.strip_prefix(HOME_DIR).is_some_and(|rest| rest.is_empty() || rest.starts_with('/')) {
        return Ok(None);
    }
    let mut clean = join_clean(String::new(), path, path)?;
    if clean.is_empty() {
        clean.push('/');
    }
    // `/home//user/x` cleans into the home directory: the home's own checks apply.
    Ok((sandbox_path(&clean).is_err()).then_some(clean))
}

#[cfg(test)]
mod tests {
    use super::{check_context_cwd, outside_home, sandbox_path};

    #[test]
    fn contexts_may_work_in_any_clean_absolute_directory() {
        for ok in ["/home/user", "/home/user/data", "/tmp", "/tmp/x", "/root", "/"] {
            assert!(check_context_cwd(ok).is_ok(), "{ok}");
        }
        for bad in ["relative", "/tmp/../etc", "/a\0b"] {
            assert!(check_context_cwd(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn paths_stay_in_home() {
        assert_eq!(sandbox_path("a/b.txt").unwrap(), "/home/user/a/b.txt");
        assert_eq!(sandbox_path("/home/user/x").unwrap(), "/home/user/x");
        assert_eq!(sandbox_path("/home/user").unwrap(), "/home/user");
        assert!(sandbox_path("/etc/passwd").is_err());
        assert!(sandbox_path("/home/username").is_err());
        assert!(sandbox_path("../x").is_err());
    }

    #[test]
    fn paths_outside_home_are_cleaned_and_home_paths_are_not_outside() {
        assert_eq!(outside_home("/proc/sys/kernel/random/boot_id").unwrap().as_deref(), Some("/proc/sys/kernel/random/boot_id"));
        assert_eq!(outside_home("//etc/./os-release").unwrap().as_deref(), Some("/etc/os-release"));
        assert_eq!(outside_home("/home/username").unwrap().as_deref(), Some("/home/username"));
        assert_eq!(outside_home("/").unwrap().as_deref(), Some("/"));
        for home in ["/home/user", "/home/user/x", "relative", "/home//user/x"] {
            assert_eq!(outside_home(home).unwrap(), None, "{home}");
        }
        assert!(outside_home("/etc/../home/user/x").is_err());
        assert!(outside_home("/etc/a\0b").is_err());
    }
}
