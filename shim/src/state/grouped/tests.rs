use super::*;

const MIB: u64 = 1 << 20;

fn rules() -> Rules {
    Rules {
        least: 2 * MIB,
        min_life: 4,
        spread: 4,
        cap: 256 * MIB,
        page: 2 * MIB,
    }
}

/// One step: three saved blocks (16, 8 and 3 MiB) made one after another,
/// a temporary between them, and all freed late and together; the blocks'
/// starts are `base + n`.
fn a_step(grouped: &Grouped, base: usize) {
    let sizes = [16 * MIB, 8 * MIB, 4 * MIB, 3 * MIB];
    for (n, size) in sizes.into_iter().enumerate() {
        let number = grouped.number(size, u64::MAX);
        assert_eq!(number, n as u32);
        grouped.handed(number, base + n);
        if n == 2 {
            grouped.freed(base + n); // the temporary
        }
    }
    for _ in 0..8 {
        grouped.number(64 * MIB, u64::MAX); // outlives the step: never grouped
    }
    for n in [0, 1, 3] {
        grouped.freed(base + n);
    }
}

/// After [`a_step`], the next step's group made at `1 << 30` on stream 7
/// by its first member (16 MiB): the group and its start.
fn a_group_made() -> (Grouped, usize) {
    let grouped = Grouped::default();
    a_step(&grouped, 1000);
    grouped.step(&rules());
    let base = 1 << 30;
    let planned = grouped
        .planned(grouped.number(16 * MIB, u64::MAX), 16 * MIB, u64::MAX)
        .unwrap();
    grouped.made(base, planned, 7);
    (grouped, base)
}

#[test]
fn a_step_plans_the_next_ones_group_at_its_first_members_number() {
    let grouped = Grouped::default();
    a_step(&grouped, 1000);
    grouped.step(&rules());
    let planned = grouped
        .planned(0, 16 * MIB, u64::MAX)
        .expect("a group at 0");
    assert_eq!(planned.bytes, 28 * MIB, "16 + 8 + 4 (3 MiB in whole pages)");
    assert_eq!(
        planned.rest,
        vec![
            Slot {
                number: 1,
                size: 8 * MIB,
                offset: 16 * MIB
            },
            Slot {
                number: 3,
                size: 3 * MIB,
                offset: 24 * MIB
            },
        ]
    );
    assert_eq!(grouped.planned(0, 8 * MIB, u64::MAX), None, "another size");
    assert_eq!(
        grouped.planned(0, 16 * MIB, 16 * MIB),
        None,
        "over the most"
    );
    assert_eq!(
        grouped.planned(1, 8 * MIB, u64::MAX),
        None,
        "no group begins there"
    );
}

#[test]
fn members_take_their_places_and_the_last_free_gives_the_group_back() {
    let (grouped, base) = a_group_made();
    assert_eq!(
        grouped.place(grouped.number(8 * MIB, u64::MAX), 8 * MIB, 7),
        Some(base + 16 * MIB as usize)
    );
    // The temporary is no member.
    assert_eq!(
        grouped.place(grouped.number(4 * MIB, u64::MAX), 4 * MIB, 7),
        None
    );
    let last = base + 24 * MIB as usize;
    assert_eq!(
        grouped.place(grouped.number(3 * MIB, u64::MAX), 3 * MIB, 7),
        Some(last)
    );
    assert!(grouped.holds(base) && grouped.holds(last));
    assert!(!grouped.holds(base + 1), "inside, but no member's start");
    let on_two = MemberFree {
        event: 42,
        runtime: true,
        stream: 2,
    };
    assert_eq!(
        grouped.free_member(last, Some(on_two), false),
        Some(Freed::Kept)
    );
    assert_eq!(
        grouped.free_member(last, None, false),
        None,
        "no member now"
    );
    assert_eq!(grouped.free_member(base, None, false), Some(Freed::Kept));
    // The group's start freed again while the group lives: refused.
    assert_eq!(grouped.free_member(base, None, false), Some(Freed::Again));
    assert_eq!(
        grouped.free_member(base + 16 * MIB as usize, None, false),
        Some(Freed::Last {
            base,
            frees: vec![on_two],
            held: false
        })
    );
    assert!(!grouped.holds(base), "the group is gone");
}

#[test]
fn a_member_on_another_stream_ends_the_filling_and_one_freed_in_a_capture_holds_the_group() {
    let (grouped, base) = a_group_made();
    assert_eq!(
        grouped.place(grouped.number(8 * MIB, u64::MAX), 8 * MIB, 3),
        None,
        "another stream"
    );
    grouped.number(4 * MIB, u64::MAX);
    assert_eq!(
        grouped.place(grouped.number(3 * MIB, u64::MAX), 3 * MIB, 7),
        None,
        "the filling ended"
    );
    assert_eq!(
        grouped.free_member(base, None, true),
        Some(Freed::Last {
            base,
            frees: vec![],
            held: true
        })
    );
}

#[test]
fn a_step_that_differs_ends_the_filling_and_the_group_keeps_what_it_has() {
    let (grouped, base) = a_group_made();
    // Allocation 1 comes at another size: not placed, and no later one is.
    assert_eq!(
        grouped.place(grouped.number(6 * MIB, u64::MAX), 6 * MIB, 7),
        None
    );
    grouped.number(4 * MIB, u64::MAX);
    assert_eq!(
        grouped.place(grouped.number(3 * MIB, u64::MAX), 3 * MIB, 7),
        None
    );
    assert_eq!(
        grouped.free_member(base, None, false),
        Some(Freed::Last {
            base,
            frees: vec![],
            held: false
        })
    );
}

#[test]
fn a_member_that_does_not_come_is_passed_over() {
    let (grouped, base) = a_group_made();
    // Number 1 is not asked for a place (it went elsewhere); 3 still is.
    grouped.number(8 * MIB, u64::MAX);
    grouped.number(4 * MIB, u64::MAX);
    assert_eq!(
        grouped.place(grouped.number(3 * MIB, u64::MAX), 3 * MIB, 7),
        Some(base + 24 * MIB as usize)
    );
}

#[test]
fn the_record_starts_again_at_each_step() {
    let grouped = Grouped::default();
    a_step(&grouped, 1000);
    grouped.step(&rules());
    // A step with no frees: nothing to group in the one after.
    for _ in 0..4 {
        grouped.number(16 * MIB, u64::MAX);
    }
    grouped.step(&rules());
    assert_eq!(grouped.planned(0, 16 * MIB, u64::MAX), None);
    assert_eq!(grouped.number(16 * MIB, u64::MAX), 0);
}

#[test]
fn groups_are_held_to_the_most_the_steps_allocations_said() {
    let grouped = Grouped::default();
    // As `a_step`, where a group may hold at most 20 MiB: the 16 MiB block
    // stays alone, and the 8 and 3 MiB blocks group.
    for (n, size) in [16 * MIB, 8 * MIB, 4 * MIB, 3 * MIB]
        .into_iter()
        .enumerate()
    {
        grouped.handed(grouped.number(size, 20 * MIB), 1000 + n);
        if n == 2 {
            grouped.freed(1000 + n);
        }
    }
    for _ in 0..8 {
        grouped.number(64 * MIB, 20 * MIB);
    }
    for n in [0, 1, 3] {
        grouped.freed(1000 + n);
    }
    grouped.step(&rules());
    assert_eq!(grouped.planned(0, 16 * MIB, u64::MAX), None);
    let planned = grouped.planned(1, 8 * MIB, u64::MAX).expect("a group at 1");
    assert_eq!(planned.bytes, 12 * MIB);
}
