//! Several processes writing the shared ring at once while this one drains
//! it: no torn event, and every position written is either read or counted
//! lost.

use std::process::{Command, Stdio};

use vramshare_common::files::open_or_create;
use vramshare_common::ring::{check_load_event, Cursor, Ring, RingFile};

#[test]
fn four_writer_processes_and_a_reader() {
    const WRITERS: u64 = 4;
    const EVENTS: u64 = 200_000;
    let dir = tempfile::tempdir().unwrap();
    let ring = Ring::new(open_or_create::<RingFile>(dir.path()).unwrap()).unwrap();
    let writers: Vec<_> = (0..WRITERS)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_ring-load"))
                .args(["write", dir.path().to_str().unwrap(), &EVENTS.to_string()])
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut cursor = Cursor::default();
    let mut events = Vec::new();
    let mut torn = 0;
    let mut check = |events: &mut Vec<_>| {
        torn += events.iter().filter(|e| !check_load_event(e)).count();
        events.clear();
    };
    let mut outputs = Vec::new();
    for mut writer in writers {
        while writer.try_wait().unwrap().is_none() {
            cursor.drain(&ring, &mut events, false);
            check(&mut events);
        }
        let mut text = String::new();
        std::io::Read::read_to_string(writer.stdout.as_mut().unwrap(), &mut text).unwrap();
        assert!(writer.wait().unwrap().success());
        outputs.push(text);
    }
    cursor.drain(&ring, &mut events, true);
    check(&mut events);
    assert_eq!(torn, 0, "no torn event");
    let written = WRITERS * EVENTS;
    assert_eq!(ring.head(), written);
    assert_eq!(
        cursor.read + cursor.lost,
        written,
        "written = read + lost, exactly"
    );
    assert!(cursor.read > 0);
    let dropped: u64 = outputs
        .iter()
        .map(|o| o.trim().rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(dropped, ring.dropped(), "drops are counted in the file");
    assert!(cursor.lost >= dropped);
}
