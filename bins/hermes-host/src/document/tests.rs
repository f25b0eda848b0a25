//! The document's unit tests: edits, bounds, opening and saving files.

use super::*;

fn held(doc: &Document) -> String {
    doc.get(Format::Hl7).unwrap().0.to_string()
}

/// A panic in the middle of an edit (the engine answers it -32603)
/// leaves the message as it was, and the next edit goes through.
#[test]
fn a_panic_during_an_edit_leaves_the_message_whole() {
    let doc = Arc::new(Document::new(Bounds { max_bytes: 1 << 20, max_elements: 1000 }));
    doc.set_now("MSH|^~\\&|APP\rPID|1||2".into(), Format::Hl7, "test").unwrap();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        doc.edit(|message| {
            let patch = Patch { path: "PID.5".into(), value: Some("DOE".into()), remove: None, create: None };
            patch::apply(message, &patch).unwrap();
            assert!(message.as_str().ends_with("DOE"));
            panic!("a bug half-way through a batch of patches");
        })
    }));
    assert!(panicked.is_err());
    assert_eq!(held(&doc), "MSH|^~\\&|APP\rPID|1||2");
    let patch = Patch { path: "PID.3".into(), value: Some("3".into()), remove: None, create: None };
    assert_eq!(doc.patch_now(&[patch], "test").unwrap().patches_applied, 1);
    assert_eq!(held(&doc), "MSH|^~\\&|APP\rPID|1||3");
}

/// Every way in holds a message to the bounds, and a refused message
/// leaves the one held before.
#[tokio::test]
async fn messages_past_the_bounds_are_refused_and_the_held_one_stays() {
    let doc = Arc::new(Document::new(Bounds { max_bytes: 200, max_elements: 20 }));
    doc.set_now("MSH|^~\\&|A".into(), Format::Hl7, "test").unwrap();
    let many = format!("MSH|^~\\&{}", "\rNTE|1".repeat(10));
    let e = doc.set_now(many.clone(), Format::Hl7, "test").unwrap_err();
    assert_eq!(e.code, errors::INVALID_MESSAGE);
    assert!(e.message.contains("25 elements") && e.message.contains("HERMES_HOST_MAX_ELEMENTS"), "{}", e.message);
    let long = format!("MSH|^~\\&|{}", "x".repeat(300));
    let e = doc.new_message_now(Some((long, Format::Hl7))).unwrap_err();
    assert!(e.message.contains("309 bytes") && e.message.contains("HERMES_HOST_MAX_MESSAGE"), "{}", e.message);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("many.hl7");
    std::fs::write(&file, &many).unwrap();
    assert_eq!(doc.open(&file).await.unwrap_err().code, errors::INVALID_MESSAGE);
    let tree = tree::render(&Hl7Message::parse(&many).unwrap(), Format::Json).unwrap();
    let e = doc.set_now(tree, Format::Json, "test").unwrap_err();
    assert!(e.message.contains("json tree is read with at most 2 values"), "{}", e.message);
    let grow = Patch { path: "NTE[10]".into(), value: None, remove: None, create: Some(true) };
    let outcome = doc.patch_now(&[grow], "test").unwrap();
    assert_eq!(outcome.patches_applied, 0);
    assert!(outcome.errors[0].message.contains("over the limit of 20"), "{:?}", outcome.errors);
    assert_eq!(held(&doc), "MSH|^~\\&|A");
}

/// A device or a FIFO is refused -32006 at once, without a read (a FIFO
/// with no writer would block its open; /dev/zero never ends), and the
/// message held stays.
#[tokio::test]
async fn only_regular_files_are_opened() {
    let doc = Arc::new(Document::new(Bounds { max_bytes: 1 << 20, max_elements: 1000 }));
    doc.set_now("MSH|^~\\&|A".into(), Format::Hl7, "test").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR).unwrap();
    for path in [Path::new("/dev/zero"), Path::new("/dev/urandom"), &fifo, dir.path()] {
        let opened = tokio::time::timeout(std::time::Duration::from_secs(5), doc.open(path)).await;
        let e = opened.unwrap_or_else(|_| panic!("{}: no answer", path.display())).unwrap_err();
        assert_eq!(e.code, errors::PATH_NOT_FOUND, "{}: {}", path.display(), e.message);
        assert!(e.message.contains("not a regular file"), "{}", e.message);
    }
    assert_eq!(held(&doc), "MSH|^~\\&|A");
}

/// A file is read up to the limit and one byte more, whatever it is.
#[tokio::test]
async fn a_file_past_the_limit_is_refused() {
    let doc = Arc::new(Document::new(Bounds { max_bytes: 100, max_elements: 1000 }));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("long.hl7");
    std::fs::write(&path, format!("MSH|^~\\&|{}", "x".repeat(91))).unwrap();
    doc.open(&path).await.unwrap();
    std::fs::write(&path, format!("MSH|^~\\&|{}", "x".repeat(92))).unwrap();
    let e = doc.open(&path).await.unwrap_err();
    assert_eq!(e.code, errors::INVALID_MESSAGE);
    assert!(e.message.contains("HERMES_HOST_MAX_MESSAGE"), "{}", e.message);
}

#[tokio::test]
async fn save_replaces_the_file_whole_and_keeps_its_mode() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.hl7");
    std::fs::write(&path, "MSH|^~\\&|OLD\r").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let doc = Arc::new(Document::new(Bounds { max_bytes: 1 << 20, max_elements: 1000 }));
    assert_eq!(doc.save(None).await.unwrap_err().code, errors::NO_MESSAGE);
    doc.open(&path).await.unwrap();
    doc.set_now("MSH|^~\\&|NEW".into(), Format::Hl7, "test").unwrap();
    assert_eq!(doc.save(None).await.unwrap(), path);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "MSH|^~\\&|NEW");
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 1, "no temporary file left: {names:?}");
}
