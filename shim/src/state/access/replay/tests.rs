//! The replay record's unit tests.

use super::*;

fn step_of(replay: &Replay, uses: &[&[usize]]) {
    for named in uses {
        replay.record(named);
    }
    replay.step();
}

#[test]
fn next_uses_count_the_uses_until_the_step_before_named_each_block() {
    let replay = Replay::default();
    step_of(&replay, &[&[1, 2], &[3], &[1], &[4]]);
    // Now at the step's first use: 1 at 0, 3 at 1 use away, 4 at 3.
    assert_eq!(
        replay.next_uses(&[1, 3, 4, 9]),
        vec![Some(0), Some(1), Some(3), None]
    );
    replay.record(&[1, 2]);
    replay.record(&[3]);
    // 1's next is position 2; 2's is in the next step (position 0).
    assert_eq!(replay.next_uses(&[1, 2]), vec![Some(0), Some(2)]);
    assert_eq!(replay.agreement(), (2, 0, 0));
}

#[test]
fn upcoming_goes_past_the_steps_end_and_never_twice_over_what_was_looked_at() {
    let replay = Replay::default();
    step_of(&replay, &[&[1], &[2], &[3]]);
    replay.record(&[1]);
    assert_eq!(replay.upcoming(3, 10), vec![(0, 2), (1, 3), (2, 1)]);
    assert_eq!(replay.upcoming(3, 1), vec![(0, 2)]);
    replay.looked_to(2);
    assert_eq!(replay.looked_ahead(), 2);
    assert_eq!(replay.upcoming(3, 10), vec![(2, 1)]);
    // The next step begins where the look had reached past the end.
    replay.record(&[2]);
    replay.record(&[3]);
    replay.looked_to(2);
    replay.step();
    assert_eq!(replay.looked_ahead(), 2);
    assert_eq!(replay.upcoming(3, 10), vec![(2, 3)]);
}

#[test]
fn the_last_steps_first_misses_say_where_and_what_each_named() {
    let replay = Replay::default();
    step_of(&replay, &[&[7], &[1], &[2], &[3]]);
    // The first use left out (its block found one on), and a block
    // never named.
    step_of(&replay, &[&[1], &[2], &[8], &[3]]);
    let misses = replay.last_misses();
    let wanted = [
        Miss {
            at: 0,
            expected: Some(7),
            named: 1,
            found_at: Some(1),
        },
        Miss {
            at: 2,
            expected: Some(3),
            named: 8,
            found_at: None,
        },
        // Followed one on, the step's last use is compared past the
        // record's end, and finds its block one back.
        Miss {
            at: 3,
            expected: None,
            named: 3,
            found_at: Some(-1),
        },
    ];
    assert_eq!(misses, wanted);
    assert_eq!(describe(misses[0].named), "older block at 0x1");
    assert_eq!(describe(BORN_NOW | 5), "allocation 5 of its step");
    assert_eq!(describe(BORN_BEFORE | 2), "allocation 2 of the step before");
    // A step that matched throughout leaves none.
    step_of(&replay, &[&[1], &[2], &[8], &[3]]);
    assert!(replay.last_misses().is_empty());
}

#[test]
fn the_record_follows_a_step_whose_uses_came_early() {
    let replay = Replay::default();
    step_of(&replay, &[&[7], &[1], &[2], &[3]]);
    // This step left out the first use: found one position on.
    replay.record(&[1]);
    assert_eq!(replay.agreement(), (0, 1, 0));
    replay.record(&[2]);
    assert_eq!(replay.agreement(), (1, 1, 0));
    assert_eq!(replay.next_uses(&[3]), vec![Some(0)]);
}

#[test]
fn a_block_is_known_by_when_it_was_handed_out_not_by_its_start() {
    let replay = Replay::default();
    // A weight, handed out before the steps and named by its start.
    replay.handed_out(900);
    replay.step();
    replay.step();
    // Two tensors a step, the second freed before the step ends.
    replay.handed_out(100);
    replay.handed_out(200);
    step_of(&replay, &[&[100, 900], &[200], &[100]]);
    // The next step hands them out at each other's starts: the first
    // allocation now at 200, the second not handed out yet.
    replay.handed_out(200);
    replay.record(&[200, 900]);
    assert_eq!(replay.agreement(), (1, 0, 0));
    // What comes: the step's second allocation (none yet), then its
    // first, which is at 200.
    assert_eq!(replay.upcoming(2, 10), vec![(1, 200)]);
    replay.handed_out(100);
    assert_eq!(replay.upcoming(2, 10), vec![(0, 100), (1, 200)]);
    // 100 is the second allocation, needed next; 200 one use after;
    // the weight at the next step's first use.
    assert_eq!(
        replay.next_uses(&[100, 200, 900]),
        vec![Some(0), Some(1), Some(2)]
    );
    // A block the step before never named, first in a use: unseen.
    replay.record(&[300]);
    assert_eq!(replay.agreement(), (1, 1, 1));
}

#[test]
fn a_start_handed_out_again_is_no_longer_the_block_its_old_name_meant() {
    let replay = Replay::default();
    replay.handed_out(100);
    replay.step();
    // A block of the step before, used: the next step will use the
    // block handed out first in this one, at 200.
    replay.handed_out(200);
    step_of(&replay, &[&[100]]);
    assert_eq!(replay.upcoming(1, 10), vec![(0, 200)]);
    // 200 freed and handed out again: that is this step's own block.
    replay.handed_out(200);
    assert_eq!(replay.upcoming(1, 10), vec![]);
    assert_eq!(replay.next_uses(&[200]), vec![None]);
}

#[test]
fn a_step_past_the_most_blocks_kept_is_not_gone_by() {
    let replay = Replay::default();
    let many = vec![5usize; MAX_RECORDED / 2 + 1];
    step_of(&replay, &[&many, &many]);
    assert_eq!(replay.length(), 0);
    step_of(&replay, &[&[5]]);
    assert_eq!(replay.length(), 1);
}

#[test]
fn the_peak_of_the_step_before_lies_ahead_until_the_step_passes_it() {
    let replay = Replay::default();
    assert_eq!(replay.out_needed_peak(), Peak::Unknown);
    // The live blocks required the most out after the step's second use.
    replay.record(&[1]);
    replay.note_out_needed(10);
    replay.record(&[2]);
    replay.note_out_needed(30);
    replay.record(&[3]);
    replay.note_out_needed(20);
    assert_eq!(replay.out_needed_most(), 30);
    replay.step();
    assert_eq!(replay.out_needed_most(), 0);
    assert_eq!(replay.out_needed_peak(), Peak::Ahead { bytes: 30, uses: 2 });
    replay.record(&[1]);
    assert_eq!(replay.out_needed_peak(), Peak::Ahead { bytes: 30, uses: 1 });
    replay.record(&[2]);
    assert_eq!(replay.out_needed_peak(), Peak::Passed);
    // A step that required nothing out leaves the next without a peak.
    replay.record(&[3]);
    replay.step();
    assert_eq!(replay.out_needed_peak(), Peak::Unknown);
}

#[test]
fn each_step_that_ends_keeps_its_uses_and_its_peak_the_last_64() {
    let replay = Replay::default();
    replay.record(&[1]);
    replay.record(&[2]);
    replay.note_out_needed(30);
    replay.record(&[3]);
    replay.note_out_needed(20);
    replay.step();
    // A step that required nothing out.
    replay.record(&[1]);
    replay.step();
    let peaks = replay.step_peaks();
    assert_eq!(
        peaks,
        vec![
            StepPeak {
                uses: 3,
                bytes: 30,
                at: 2
            },
            StepPeak {
                uses: 1,
                bytes: 0,
                at: 0
            }
        ]
    );
    for bytes in 0..100 {
        replay.record(&[1]);
        replay.note_out_needed(bytes + 1);
        replay.step();
    }
    let peaks = replay.step_peaks();
    assert_eq!(peaks.len(), 64);
    assert_eq!(peaks[0].bytes, 37);
    assert_eq!(peaks[63].bytes, 100);
}
