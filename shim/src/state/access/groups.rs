//! Groups of a step's long-lived blocks: blocks made one after another and
//! freed at about the same time (a layer's saved tensors, made in its
//! forward and freed in its backward), so that one range of one handle
//! could hold each group and one move carry it. Each move of a block costs
//! the driver about the same whatever the block's size (device memory made,
//! mapped, its access set, unmapped, released), and the driver makes one
//! such call at a time for the whole process: a group of five blocks moves
//! with a fifth of those calls.
//!
//! Read from the step before's record of its allocations (their order,
//! sizes, and when each was freed), as `bench/step-groups` reads a step
//! file: a block is long-lived where it is of the tier's sizes and lives at
//! least [`Rules::min_life`] of the step's allocations and frees; in the
//! order they were made, a long-lived block joins the group before it where
//! its free came within [`Rules::spread`] operations of that group's first
//! block's free and the group, in whole pages, stays within [`Rules::cap`].

/// One allocation of a step, as the step recorded it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Made {
    /// Its bytes.
    pub size: u64,
    /// The step's operation (allocation or free, counted from the step's
    /// start) that made it.
    pub made_at: u32,
    /// The operation that freed it, or `None` where it outlived the step.
    pub freed_at: Option<u32>,
}

/// How blocks are grouped.
#[derive(Clone, Copy, Debug)]
pub struct Rules {
    /// The least bytes a block of a group holds: the tier's page.
    pub least: u64,
    /// The fewest operations a block of a group lives.
    pub min_life: u32,
    /// How far apart, in operations, the frees of a group's blocks may be.
    pub spread: u32,
    /// The most bytes a group holds, in whole pages.
    pub cap: u64,
    /// The page a block's bytes are rounded up to.
    pub page: u64,
}

/// A group: the step's allocations (their indices among the step's
/// allocations) that one range holds, one after another, and its bytes in
/// whole pages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    pub members: Vec<usize>,
    pub bytes: u64,
}

impl Rules {
    /// `size` in whole pages.
    pub fn pages(&self, size: u64) -> u64 {
        size.div_ceil(self.page).saturating_mul(self.page)
    }

    /// Whether `made` is long-lived by these rules.
    fn long_lived(&self, made: &Made) -> bool {
        let Some(freed_at) = made.freed_at else {
            return false;
        };
        made.size >= self.least && freed_at.saturating_sub(made.made_at) >= self.min_life
    }
}

/// The groups of a step's allocations `made` (in the order they were made)
/// by `rules`. A group of one block is left out: it saves nothing.
pub fn groups(made: &[Made], rules: &Rules) -> Vec<Group> {
    let mut groups: Vec<(Group, u32)> = Vec::new();
    for (index, block) in made.iter().enumerate() {
        if !rules.long_lived(block) {
            continue;
        }
        let freed_at = block.freed_at.unwrap_or(u32::MAX);
        let bytes = rules.pages(block.size);
        match groups.last_mut() {
            Some((group, first_freed))
                if freed_at.abs_diff(*first_freed) <= rules.spread
                    && group.bytes.saturating_add(bytes) <= rules.cap =>
            {
                group.members.push(index);
                group.bytes += bytes;
            }
            _ => groups.push((
                Group {
                    members: vec![index],
                    bytes,
                },
                freed_at,
            )),
        }
    }
    groups
        .into_iter()
        .map(|(group, _)| group)
        .filter(|group| group.members.len() > 1)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn rules() -> Rules {
        Rules {
            least: 2 * MIB,
            min_life: 64,
            spread: 32,
            cap: 256 * MIB,
            page: 2 * MIB,
        }
    }

    fn made(size_mib: u64, made_at: u32, freed_at: u32) -> Made {
        Made {
            size: size_mib * MIB,
            made_at,
            freed_at: Some(freed_at),
        }
    }

    #[test]
    fn a_layers_saved_blocks_form_one_group_in_the_order_made() {
        // Two layers' forward (made at 0..3 and 10..13), freed in reverse in
        // the backward (layer two first), with short-lived blocks between.
        let step = [
            made(16, 0, 300),
            made(8, 1, 302),
            made(4, 2, 5), // short-lived: a temporary of the forward
            made(32, 3, 301),
            made(16, 10, 200),
            made(8, 11, 202),
            made(32, 13, 201),
        ];
        let found = groups(&step, &rules());
        assert_eq!(
            found,
            vec![
                Group {
                    members: vec![0, 1, 3],
                    bytes: 56 * MIB
                },
                Group {
                    members: vec![4, 5, 6],
                    bytes: 56 * MIB
                },
            ]
        );
    }

    #[test]
    fn a_group_stops_at_its_cap_and_small_or_unfreed_blocks_stay_alone() {
        let step = [
            made(100, 0, 500),
            made(100, 1, 500),
            made(100, 2, 500), // would take the group past 256 MiB
            made(100, 3, 501),
            made(1, 4, 500), // below a page
            Made {
                size: 64 * MIB,
                made_at: 5,
                freed_at: None, // outlives the step: a parameter's gradient
            },
        ];
        let found = groups(&step, &rules());
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].members, vec![0, 1]);
        assert_eq!(found[1].members, vec![2, 3]);
        assert!(found.iter().all(|group| group.bytes <= rules().cap));
    }

    #[test]
    fn blocks_freed_far_apart_are_not_grouped_and_a_lone_block_is_no_group() {
        let step = [made(16, 0, 100), made(16, 1, 400), made(16, 2, 700)];
        assert!(groups(&step, &rules()).is_empty());
    }

    #[test]
    fn sizes_round_up_to_whole_pages() {
        let step = [
            Made {
                size: 3 * MIB,
                made_at: 0,
                freed_at: Some(100),
            },
            Made {
                size: 2 * MIB + 1,
                made_at: 1,
                freed_at: Some(101),
            },
        ];
        assert_eq!(groups(&step, &rules())[0].bytes, 8 * MIB);
    }
}
