//! packaging/systemd and scripts/install.sh as an operator gets them: installed into a scratch
//! root for a system install and for `--user`, the rendered units checked for their paths and
//! users and verified by `systemd-analyze verify` (system and user manager).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::util::{assert_exit, repo_file, run, scratch, snapshot, stderr, stdout};

/// This build's binary and its checksum, as scripts/release.sh leaves them.
fn staged_binary(dir: &Path) -> PathBuf {
    let staged = dir.join("dist");
    std::fs::create_dir_all(&staged).unwrap();
    let bin = staged.join("tenantci");
    std::fs::copy(crate::util::bin(), &bin).unwrap();
    let sum = Command::new("sha256sum")
        .arg("tenantci")
        .current_dir(&staged)
        .output()
        .unwrap();
    std::fs::write(staged.join("tenantci.sha256"), sum.stdout).unwrap();
    bin
}

/// One scratch install: `root` is DESTDIR, `home` the $HOME the script saw.
struct Install {
    root: PathBuf,
    home: PathBuf,
    user: bool,
}

impl Install {
    fn new(dir: &Path, user: bool) -> Self {
        let name = if user { "user" } else { "system" };
        Install {
            root: dir.join(format!("root-{name}")),
            home: dir.join(format!("home-{name}")),
            user,
        }
    }

    fn run(&self, bin: &Path) -> Output {
        let mut cmd = Command::new("bash");
        cmd.arg(repo_file("scripts/install.sh"))
            .env("BIN", bin)
            .env("DESTDIR", &self.root)
            .env("HOME", &self.home)
            .env_remove("PREFIX");
        if self.user {
            cmd.arg("--user");
        }
        run(&mut cmd)
    }

    /// The binary as the units name it (DESTDIR stripped), and where it is in the scratch root.
    fn tenantci(&self) -> (PathBuf, PathBuf) {
        let prefix = if self.user {
            self.home.join(".local")
        } else {
            PathBuf::from("/usr/local")
        };
        let named = prefix.join("bin/tenantci");
        let installed = self.root.join(named.strip_prefix("/").unwrap());
        (named, installed)
    }

    fn unit_dir(&self) -> PathBuf {
        let dir = if self.user {
            self.home.join(".config/systemd/user")
        } else {
            PathBuf::from("/etc/systemd/system")
        };
        self.root.join(dir.strip_prefix("/").unwrap())
    }

    fn units(&self) -> Vec<(String, String)> {
        let mut units: Vec<_> = std::fs::read_dir(self.unit_dir())
            .unwrap()
            .map(|e| {
                let path = e.unwrap().path();
                let name = path.file_name().unwrap().to_str().unwrap().to_string();
                (name, std::fs::read_to_string(&path).unwrap())
            })
            .collect();
        units.sort();
        units
    }
}

/// A system and a `--user` install of this build into `dir`, each with install.sh's output.
fn install_both(dir: &Path) -> Vec<(Install, Output)> {
    let bin = staged_binary(dir);
    [false, true]
        .into_iter()
        .map(|user| {
            let install = Install::new(dir, user);
            let o = install.run(&bin);
            assert_exit(&o, 0);
            (install, o)
        })
        .collect()
}

fn shipped_units() -> usize {
    std::fs::read_dir(repo_file("packaging/systemd"))
        .unwrap()
        .count()
}

/// Values of `Key=` lines outside comments, e.g. every `ExecStart` variant.
fn settings<'a>(unit: &'a str, key_prefix: &str) -> Vec<(&'a str, &'a str)> {
    unit.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| k.starts_with(key_prefix))
        .collect()
}

#[test]
fn install_sh_renders_the_units_for_system_and_user_installs() {
    let dir = scratch();
    for (install, o) in install_both(dir.path()) {
        let user = install.user;
        let reload = if user {
            "next: systemctl --user daemon-reload"
        } else {
            "next: systemctl daemon-reload"
        };
        assert!(!stdout(&o).contains(reload), "DESTDIR set: {}", stdout(&o));
        let (tenantci, installed) = install.tenantci();
        assert!(installed.is_file(), "{}", installed.display());
        if user {
            assert!(
                !install.root.join("usr").exists(),
                "--user installs nothing outside $HOME"
            );
        }
        let units = install.units();
        assert_eq!(units.len(), shipped_units());
        for (name, text) in &units {
            for (key, command) in settings(text, "Exec") {
                let program = command.trim_start_matches(['-', '@', '+', '!']);
                let program = program.split_whitespace().next().unwrap();
                if program.ends_with("/tenantci") {
                    assert_eq!(Path::new(program), tenantci, "{name} {key}");
                }
                if program.ends_with("/systemctl") {
                    assert_eq!(command.contains(" --user "), user, "{name} {key}={command}");
                }
            }
            // The system units run as root on purpose (root's 0600 config.toml and key); a
            // user manager refuses User=, and its units may not name system paths.
            assert!(settings(text, "User").is_empty(), "{name}");
            assert!(settings(text, "Group").is_empty(), "{name}");
            for (key, value) in settings(text, "") {
                for fixed in ["/etc/", "/var/lib/", "/root/"] {
                    assert!(
                        !value.contains(fixed),
                        "{name}: {key}={value} names {fixed}; use %E / %S so --user works"
                    );
                }
            }
        }
        let renew = &units
            .iter()
            .find(|(n, _)| n == "tenantci-credential-renew@.service")
            .unwrap()
            .1;
        assert_eq!(
            settings(renew, "OnFailure"),
            [("OnFailure", "tenantci-notify@%N.service")]
        );
        // bootstrap runner's defaults live under /etc/gitlab-runner, which %E resolves to for
        // the system unit; the textfile's directory is the unit's own StateDirectory.
        assert!(
            settings(renew, "ReadWritePaths").contains(&("ReadWritePaths", "-%E/gitlab-runner"))
        );
        let textfile = settings(renew, "Environment")
            .into_iter()
            .find(|(k, v)| *k == "Environment" && v.starts_with("TENANTCI_RENEW_TEXTFILE="))
            .unwrap()
            .1;
        assert!(
            textfile.starts_with("TENANTCI_RENEW_TEXTFILE=%S/node_exporter/textfile_collector/")
                && textfile.ends_with("_%i.prom"),
            "{textfile}"
        );
        assert!(
            settings(renew, "StateDirectory")
                .contains(&("StateDirectory", "node_exporter/textfile_collector"))
        );
        assert_dispatch_renewal(&units);
    }
}

/// The dispatcher's renewal: notified on failure, writing only its instance's directory, and
/// making the running dispatcher reload (SIGHUP), which its unit supports.
fn assert_dispatch_renewal(units: &[(String, String)]) {
    let unit = |name: &str| &units.iter().find(|(n, _)| n == name).unwrap().1;
    let renew = unit("tenantci-dispatch-renew@.service");
    assert_eq!(
        settings(renew, "OnFailure"),
        [("OnFailure", "tenantci-notify@%N.service")]
    );
    assert_eq!(
        settings(renew, "ReadWritePaths"),
        [("ReadWritePaths", "%E/tenantci/dispatch/%i")]
    );
    let start = settings(renew, "ExecStart")[0].1;
    assert!(
        start.contains(" dispatch renew --config %E/tenantci/dispatch/%i/config.toml "),
        "{start}"
    );
    assert!(
        settings(renew, "ExecStartPost")[0]
            .1
            .ends_with("try-reload-or-restart tenantci-dispatch@%i.service")
    );
    assert_eq!(
        settings(unit("tenantci-dispatch@.service"), "ExecReload"),
        [("ExecReload", "/bin/kill -HUP $MAINPID")]
    );
    assert!(unit("tenantci-dispatch-renew@.timer").contains("Persistent=true"));
}

/// Every shipped unit, as install.sh rendered it, passes `systemd-analyze verify` for the
/// manager it is installed for. verify insists that executables exist: gitlab-runner (not
/// installed here) is swapped for /bin/true, tenantci is the installed copy.
#[test]
fn systemd_units_pass_systemd_analyze_verify_for_system_and_user() {
    let dir = scratch();
    for (install, _) in install_both(dir.path()) {
        let user = install.user;
        let (tenantci, installed) = install.tenantci();
        let verify_dir = dir.path().join(format!("verify-{user}"));
        std::fs::create_dir(&verify_dir).unwrap();
        for (name, text) in install.units() {
            let text = text
                .replace(tenantci.to_str().unwrap(), installed.to_str().unwrap())
                .replace("/usr/bin/gitlab-runner", "/bin/true");
            std::fs::write(verify_dir.join(name.replace("@.", "@ci.")), text).unwrap();
        }
        let units: Vec<_> = std::fs::read_dir(&verify_dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(units.len(), shipped_units());
        let runtime = dir.path().join(format!("runtime-{user}"));
        std::fs::create_dir(&runtime).unwrap();
        let mut cmd = Command::new("systemd-analyze");
        if user {
            // The user manager's lookup needs a runtime directory, as a login session has.
            cmd.arg("--user").env("XDG_RUNTIME_DIR", &runtime);
        }
        let o = cmd
            .arg("verify")
            .args(&units)
            .output()
            .expect("systemd-analyze (scripts/test.sh installs systemd)");
        assert!(
            o.status.success() && o.stderr.is_empty(),
            "user={user}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

#[test]
fn install_sh_installs_once_and_then_changes_nothing() {
    let dir = scratch();
    let bin = staged_binary(dir.path());
    let install = Install::new(dir.path(), false);
    let o = install.run(&bin);
    assert_exit(&o, 0);
    assert!(stdout(&o).contains("installed"), "{}", stdout(&o));
    for f in [
        "usr/local/bin/tenantci",
        "etc/systemd/system/tenantci-dispatch@.service",
        "etc/systemd/system/tenantci-credential-renew@.timer",
        "etc/systemd/system/tenantci-dispatch-renew@.timer",
        "etc/systemd/system/tenantci-gitlab-runner.service",
        "etc/systemd/system/tenantci-front.service",
        "etc/systemd/system/tenantci-front-connect.service",
        "etc/systemd/system/tenantci-front-signer.service",
        "etc/systemd/system/tenantci-notify@.service",
        "usr/local/share/bash-completion/completions/tenantci",
        "usr/local/share/man/man1/tenantci-runner-check.1",
    ] {
        assert!(install.root.join(f).is_file(), "{f}");
    }
    let before = snapshot(&install.root);
    let o = install.run(&bin);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o).trim(), "nothing changed");
    assert_eq!(snapshot(&install.root), before);

    // A binary that does not match its checksum is refused before anything is written.
    std::fs::write(&bin, b"not the binary").unwrap();
    let fresh = Install::new(&dir.path().join("fresh"), false);
    let o = fresh.run(&bin);
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("does not match"), "{}", stderr(&o));
    assert!(!fresh.root.exists());
}
