//! The file API: round trips, listings, and paths the sandbox controls (symlinks, `..`).

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_round_trip_and_list() {
    let backend = backend();
    let sandbox = sandbox(&backend).await;
    let info = sandbox.write_file("data/in.csv", b"a,b\n1,2\n").await.unwrap();
    assert_eq!(info.path, "/home/user/data/in.csv");
    assert_eq!(info.size, 8);
    assert_eq!(
        eval(&sandbox, "open('/home/user/data/in.csv').read()").await,
        "a,b\\n1,2\\n"
    );
    eval(&sandbox, "open('out.txt', 'w').write('from sandbox')").await;
    assert_eq!(
        sandbox.read_file("/home/user/out.txt").await.unwrap(),
        b"from sandbox"
    );
    assert_eq!(sandbox.read_file("out.txt").await.unwrap(), b"from sandbox");
    let names: Vec<(String, bool)> = sandbox
        .list_files("/home/user")
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.is_dir))
        .collect();
    assert_eq!(names, [("data".to_owned(), true), ("out.txt".to_owned(), false)]);
    // The sandbox can write files it was given (ownership is the sandbox uid).
    eval(&sandbox, "open('data/in.csv', 'a').write('3,4\\n')").await;
    // A path outside the home is read inside the sandbox: its own /etc/passwd, not the host's.
    let passwd = String::from_utf8(sandbox.read_file("/etc/passwd").await.unwrap()).unwrap();
    assert!(
        passwd.starts_with("user:x:") && !passwd.contains("root:"),
        "{passwd}"
    );
    assert!(sandbox.write_file("/etc/passwd", b"x").await.is_err());
    for bad in ["../x", "/home/user/../../etc/passwd", ""] {
        let err = sandbox.read_file(bad).await.unwrap_err();
        assert!(
            matches!(err, waxell::sandbox::SandboxError::InvalidPath { .. }),
            "{bad:?}: {err:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlink_traps_planted_by_the_sandbox_give_errors_not_content() {
    let backend = backend();
    let sandbox = sandbox(&backend).await;
    let secret = std::env::temp_dir().join(format!("waxell-host-secret-{}", std::process::id()));
    std::fs::write(&secret, "HOST SECRET").unwrap();
    let code = format!(
        "import os\nos.symlink('/etc/shadow', 'report.txt')\nos.symlink('{0}', 'secret.txt')\nos.symlink('/etc', 'etcdir')\nos.mkfifo('pipe')",
        secret.display()
    );
    let planted = run(&sandbox, &code).await;
    assert!(planted.error.is_none(), "{:?}", planted.error);
    for path in [
        "report.txt",
        "secret.txt",
        "etcdir/passwd",
        "/home/user/etcdir/shadow",
        "pipe",
    ] {
        let result = sandbox.read_file(path).await;
        assert!(
            matches!(result, Err(waxell::sandbox::SandboxError::InvalidPath { .. })),
            "{path}: {result:?}"
        );
    }
    // Writes through the symlinks are refused too, and the targets are untouched.
    assert!(sandbox.write_file("secret.txt", b"overwritten").await.is_err());
    assert!(sandbox.write_file("etcdir/evil", b"x").await.is_err());
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "HOST SECRET");
    assert!(!std::path::Path::new("/etc/evil").exists());
    assert!(sandbox.list_files("etcdir").await.is_err());
    std::fs::remove_file(secret).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn make_dir_and_remove_never_leave_the_scratch_dir() {
    let backend = backend();
    let sandbox = sandbox(&backend).await;
    // A host directory the sandbox cannot see but can name in a symlink's target.
    let outside = std::env::temp_dir().join(format!("waxell-host-outside-{}", std::process::id()));
    std::fs::create_dir_all(outside.join("keep")).unwrap();
    std::fs::write(outside.join("keep/data.txt"), "HOST DATA").unwrap();

    assert!(sandbox.make_dir("a/b/c").await.unwrap(), "created");
    assert!(
        !sandbox.make_dir("/home/user/a/b/c").await.unwrap(),
        "already there"
    );
    assert_eq!(
        eval(
            &sandbox,
            "import os; (os.path.isdir('a/b/c'), os.stat('a/b/c').st_uid == os.getuid())"
        )
        .await,
        "(True, True)",
        "the code sees the directory, owned by the sandbox user"
    );

    let code = format!(
        "os.makedirs('tree/deep', exist_ok=True)\nopen('tree/deep/f.txt', 'w').write('x')\n\
         os.symlink('{0}', 'tree/escape')\nos.symlink('{0}', 'link')\nos.symlink('{0}/keep/data.txt', 'file_link')",
        outside.display()
    );
    let planted = run(&sandbox, &code).await;
    assert!(planted.error.is_none(), "{:?}", planted.error);
    // Removing a tree with a symlink in it, or a symlink, removes the link and never its target.
    sandbox.remove("tree").await.unwrap();
    sandbox.remove("link").await.unwrap();
    sandbox.remove("file_link").await.unwrap();
    assert_eq!(
        eval(
            &sandbox,
            "(os.path.lexists('tree'), os.path.lexists('link'), os.path.lexists('file_link'))"
        )
        .await,
        "(False, False, False)"
    );
    assert_eq!(
        std::fs::read_to_string(outside.join("keep/data.txt")).unwrap(),
        "HOST DATA"
    );
    // make_dir through a symlink is refused, and nothing appears at its target.
    run(&sandbox, &format!("os.symlink('{}', 'link')", outside.display())).await;
    assert!(sandbox.make_dir("link/new").await.is_err());
    assert!(!outside.join("new").exists());

    for bad in ["", "/home/user", "..", "../x", "/etc"] {
        let result = sandbox.remove(bad).await;
        assert!(
            matches!(result, Err(waxell::sandbox::SandboxError::InvalidPath { .. })),
            "{bad:?}: {result:?}"
        );
    }
    let missing = sandbox.remove("missing").await;
    assert!(
        matches!(&missing, Err(waxell::sandbox::SandboxError::FileNotFound { path }) if path == "missing"),
        "{missing:?}"
    );
    // rename: the destination's parents are made; a link moves as a link; no move through a link.
    sandbox.write_file("r/a.txt", b"moved").await.unwrap();
    let moved = sandbox
        .rename("r/a.txt", "/home/user/m/deep/b.txt")
        .await
        .unwrap();
    assert_eq!(
        (moved.path.as_str(), moved.size, moved.is_dir),
        ("/home/user/m/deep/b.txt", 5, false)
    );
    assert_eq!(
        eval(
            &sandbox,
            "(open('m/deep/b.txt').read(), os.path.exists('r/a.txt'))"
        )
        .await,
        "('moved', False)"
    );
    sandbox.rename("link", "link2").await.unwrap();
    assert_eq!(eval(&sandbox, "os.path.islink('link2')").await, "True");
    assert!(sandbox.rename("m/deep/b.txt", "link2/b.txt").await.is_err());
    assert!(!outside.join("b.txt").exists());
    assert!(sandbox.rename("m", "../m").await.is_err());
    sandbox.rename("link2", "link").await.unwrap();
    sandbox.remove("m").await.unwrap();
    sandbox.remove("r").await.unwrap();

    sandbox.remove("a").await.unwrap();
    assert_eq!(eval(&sandbox, "sorted(os.listdir('.'))").await, "['link']");
    std::fs::remove_dir_all(outside).unwrap();
}
