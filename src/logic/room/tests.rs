use super::*;

const START: u64 = 1_000_000;

fn room(rate: Option<(u64, u64)>, window_ms: u64) -> Room {
    let config = RoomConfig {
        rate: rate.map(|(users, per_ms)| Rate { users, per_ms }),
        window_ms,
        presence_ms: None,
    };
    Room::new(config, 0x5EC_C111, Some(START), START - 10_000)
}

/// The users a step admitted, in order.
fn admits(moves: Vec<Move>) -> Vec<UserRef> {
    moves
        .into_iter()
        .filter_map(|m| match m {
            Move::Admit(at) => Some(at),
            _ => None,
        })
        .collect()
}

fn user(n: usize) -> Vec<u8> {
    format!("user:{n}").into_bytes()
}

/// The order users are admitted in, admitting everyone by hand after START.
fn admission_order(room: &mut Room, users: usize) -> Vec<usize> {
    admits(room.step(START, u64::MAX));
    let admitted = admits(room.admit(users as u64, START, u64::MAX));
    admitted
        .iter()
        .map(|&at| {
            let name = std::str::from_utf8(room.user(at)).unwrap();
            name["user:".len()..].parse().unwrap()
        })
        .collect()
}

#[test]
fn before_start_every_joiner_is_told_the_cohorts_size() {
    let mut room = room(None, DEFAULT_WINDOW_MS);
    assert_eq!(room.join(b"a", START - 5), Ok(Place::Cohort(1)));
    assert_eq!(room.join(b"b", START - 4), Ok(Place::Cohort(2)));
    assert_eq!(
        room.join(b"a", START - 3),
        Ok(Place::Cohort(2)),
        "joining again"
    );
    assert_eq!(room.place(b"a"), Some(Place::Cohort(2)));
    assert_eq!(room.place(b"nobody"), None);
    assert_eq!(room.join(b"", START), Err(RoomError::EmptyUser));
    assert_eq!(Place::Cohort(2).reply(), 2);
}

#[test]
fn at_start_the_cohort_gets_places_1_to_n_then_later_joiners_queue_in_arrival_order() {
    let mut room = room(None, DEFAULT_WINDOW_MS);
    for n in 0..50 {
        room.join(&user(n), START - 100).unwrap();
    }
    assert!(
        admits(room.step(START - 1, 100)).is_empty(),
        "nothing before START"
    );
    assert_eq!(room.next_step_ms(), Some(START));
    admits(room.step(START, 100));
    let mut places: Vec<u64> = (0..50)
        .map(|n| match room.place(&user(n)).unwrap() {
            Place::Waiting(p) => p,
            other => panic!("{other:?}"),
        })
        .collect();
    places.sort_unstable();
    assert_eq!(places, (1..=50).collect::<Vec<u64>>());
    assert_eq!(room.join(b"late-1", START + 5), Ok(Place::Waiting(51)));
    assert_eq!(room.join(b"late-2", START + 6), Ok(Place::Waiting(52)));
    let order = admits(room.admit(60, START + 7, 100));
    assert_eq!(order.len(), 52);
    assert_eq!(room.user(order[50]), b"late-1");
    assert_eq!(room.user(order[51]), b"late-2");
}

#[test]
fn a_join_after_start_draws_the_cohort_first() {
    let mut room = room(None, DEFAULT_WINDOW_MS);
    room.join(b"early", START - 1).unwrap();
    assert_eq!(room.join(b"late", START + 1), Ok(Place::Waiting(2)));
    assert_eq!(room.place(b"early"), Some(Place::Waiting(1)));
}

#[test]
fn a_room_without_start_is_first_come_first_served() {
    let config = RoomConfig {
        rate: None,
        window_ms: 10,
        presence_ms: None,
    };
    let mut room = Room::new(config, 1, None, 0);
    assert_eq!(room.join(b"a", 1), Ok(Place::Waiting(1)));
    assert_eq!(room.join(b"b", 2), Ok(Place::Waiting(2)));
    let admitted = admits(room.admit(1, 3, 10));
    assert_eq!(room.user(admitted[0]), b"a");
    assert_eq!(room.place(b"b"), Some(Place::Waiting(1)));
}

/// Spearman's rank correlation of two rankings of the same items (no ties).
fn spearman(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len() as f64;
    let d2: f64 = a.iter().zip(b).map(|(x, y)| (x - y).powi(2)).sum();
    1.0 - 6.0 * d2 / (n * (n * n - 1.0))
}

#[test]
fn the_cohort_is_a_uniform_shuffle_bots_who_joined_first_gain_nothing() {
    // 10 000 joiners before START, the first 1 000 bots: a bot's admission rank is uniform,
    // so the bots' mean rank is within 3 standard deviations of the middle, and the join
    // order and the admission order are uncorrelated.
    const USERS: usize = 10_000;
    const BOTS: usize = 1_000;
    for seed in [1u64, 2, 3] {
        let config = RoomConfig {
            rate: None,
            window_ms: DEFAULT_WINDOW_MS,
            presence_ms: None,
        };
        let mut room = Room::new(config, seed, Some(START), 0);
        for n in 0..USERS {
            room.join(&user(n), START - 1).unwrap();
        }
        let order = admission_order(&mut room, USERS);
        let mut rank = vec![0.0; USERS];
        for (r, &n) in order.iter().enumerate() {
            rank[n] = r as f64;
        }
        let bots_mean = rank[..BOTS].iter().sum::<f64>() / BOTS as f64;
        let middle = (USERS - 1) as f64 / 2.0;
        // Sampling without replacement: sd of the mean = sqrt((N^2-1)/12 / k * (N-k)/(N-1)).
        let (n, k) = (USERS as f64, BOTS as f64);
        let sd = ((n * n - 1.0) / 12.0 / k * (n - k) / (n - 1.0)).sqrt();
        assert!(
            (bots_mean - middle).abs() < 3.0 * sd,
            "seed {seed}: bots' mean rank {bots_mean}, middle {middle}, sd {sd}"
        );
        let joined: Vec<f64> = (0..USERS).map(|n| n as f64).collect();
        let rho = spearman(&joined, &rank);
        assert!(rho.abs() < 0.05, "seed {seed}: rho {rho}");
    }
}

#[test]
fn the_same_seed_gives_the_same_order_on_every_copy() {
    let order = |seed| {
        let config = RoomConfig {
            rate: None,
            window_ms: 1,
            presence_ms: None,
        };
        let mut room = Room::new(config, seed, Some(START), 0);
        for n in 0..200 {
            room.join(&user(n), START - 1).unwrap();
        }
        admission_order(&mut room, 200)
    };
    assert_eq!(order(9), order(9));
    assert_ne!(order(9), order(10));
}

#[test]
fn the_rate_admits_its_users_per_period_and_missed_ticks_are_not_saved_up() {
    let mut room = room(Some((100, 100)), DEFAULT_WINDOW_MS);
    for n in 0..10_000 {
        room.join(&user(n), START - 1).unwrap();
    }
    let mut admitted = 0;
    let mut now = START;
    // The timer's steps over 3 s, each at the next step the room asks for.
    while now < START + 3_000 {
        admitted += admits(room.step(now, u64::MAX)).len();
        now = room.next_step_ms().unwrap();
    }
    assert_eq!(admitted, 3_000, "30 ticks of 100");
    // A room stepped late admits the ticks it missed, once.
    let late = admits(room.step(now + 1_000, u64::MAX)).len();
    assert_eq!(late, 1_100);
    assert_eq!(
        admits(room.step(now + 1_000, u64::MAX)).len(),
        0,
        "nothing twice"
    );
}

#[test]
fn nobody_is_admitted_past_what_the_units_left_can_serve() {
    let mut room = room(Some((10, 100)), DEFAULT_WINDOW_MS);
    for n in 0..100 {
        room.join(&user(n), START - 1).unwrap();
    }
    assert_eq!(admits(room.step(START, 3)).len(), 3, "3 units: 3 admitted");
    assert_eq!(room.unbought(), 3);
    assert_eq!(admits(room.step(START + 100, 3)).len(), 0, "covered");
    assert_eq!(
        admits(room.admit(5, START + 100, 3)).len(),
        0,
        "by hand too"
    );
    // One buys: 2 units left, covered by the 2 still unbought.
    let first = admits(room.admit(0, START, 3));
    assert!(first.is_empty());
    let buyer = (0..100).map(user).find(|u| room.may_buy(u)).unwrap();
    room.bought(&buyer);
    assert_eq!(room.unbought(), 2);
    assert_eq!(admits(room.step(START + 200, 2)).len(), 0);
    // Units come back (a restock of 5): admission starts again.
    assert_eq!(admits(room.step(START + 300, 7)).len(), 5);
}

#[test]
fn a_lapsed_window_passes_its_place_to_the_next_in_line() {
    let mut room = room(None, 500);
    for n in 0..10 {
        room.join(&user(n), START - 1).unwrap();
    }
    admits(room.step(START, 100));
    let first = admits(room.admit(2, START, 100));
    let (a, b) = (room.user(first[0]).to_vec(), room.user(first[1]).to_vec());
    assert!(room.may_buy(&a) && room.may_buy(&b));
    room.bought(&a);
    assert_eq!(room.next_step_ms(), Some(START + 500), "b's window");
    let passed = admits(room.step(START + 500, 100));
    assert_eq!(passed.len(), 1, "b's place went on");
    assert!(!room.may_buy(&b), "b lapsed");
    assert!(room.may_buy(&a), "a bought and may buy up to LIMIT");
    assert_eq!(room.place(&b), None, "a lapsed user is not in the room");
    // b joins again: at the back.
    assert_eq!(room.join(&b, START + 501), Ok(Place::Waiting(8)));
    assert_eq!(room.waiting(), 8);
}

#[test]
fn nobody_is_admitted_twice() {
    let mut room = room(Some((7, 10)), 30);
    for n in 0..500 {
        room.join(&user(n), START - 1).unwrap();
    }
    let mut seen = std::collections::HashSet::new();
    let mut now = START;
    while let Some(next) = room.next_step_ms() {
        for at in admits(room.step(now, u64::MAX)) {
            assert!(seen.insert(room.user(at).to_vec()), "admitted twice");
        }
        now = next.max(now + 1);
        if now > START + 100_000 {
            break;
        }
    }
    assert_eq!(seen.len(), 500);
}

#[test]
fn a_not_admitted_user_may_not_buy() {
    let mut room = room(None, 100);
    room.join(b"w", START - 1).unwrap();
    assert!(!room.may_buy(b"w"));
    assert!(!room.may_buy(b"stranger"));
    admits(room.step(START, 1));
    admits(room.admit(1, START, 1));
    assert!(room.may_buy(b"w"));
}

#[test]
fn a_sold_out_room_tells_everyone_and_frees_its_memory() {
    let mut room = room(None, 100);
    for n in 0..1_000 {
        room.join(&user(n), START - 1).unwrap();
    }
    let full = room.bytes();
    room.close(START);
    assert!(room.is_closed());
    assert_eq!(room.join(&user(1), START), Ok(Place::SoldOut));
    assert_eq!(room.place(&user(2)), Some(Place::SoldOut));
    assert_eq!(room.join(b"new", START), Ok(Place::SoldOut));
    assert!(!room.may_buy(&user(1)));
    assert_eq!(room.next_step_ms(), None);
    assert!(admits(room.step(START + 1, 10)).is_empty());
    assert!(room.bytes() < full / 100, "{} of {full}", room.bytes());
    assert_eq!(Place::SoldOut.reply(), -1);
    room.reopen(START);
    assert!(!room.is_closed());
    assert_eq!(
        room.join(&user(1), START + 2),
        Ok(Place::Waiting(1)),
        "first come"
    );
    assert_eq!(admits(room.admit(1, START + 2, 1)).len(), 1);
    assert!(room.may_buy(&user(1)));
}

#[test]
fn a_waiting_user_costs_at_most_40_bytes_at_a_million_joiners() {
    let mut room = room(None, 100);
    const JOINERS: usize = 1_000_000;
    for n in 0..JOINERS {
        // 12- to 14-byte ids ("user:0" .. "user:999999", padded as apps' ids are).
        room.join(format!("user:{n:08}").as_bytes(), START - 1)
            .unwrap();
    }
    let per_user = room.bytes() as f64 / JOINERS as f64;
    assert!(per_user <= 40.0, "{per_user:.1} bytes per waiting user");
}

#[test]
fn a_room_rebuilt_from_its_state_is_the_same_room() {
    let mut original = room(Some((3, 100)), 500);
    for n in 0..40 {
        original.join(&user(n), START - 1).unwrap();
    }
    admits(original.step(START, 20));
    let bought = (0..40).map(user).find(|u| original.may_buy(u)).unwrap();
    original.bought(&bought);
    admits(original.step(START + 100, 20));
    let config = original.config();
    let mut copy = Room::from_state(config, 0x5EC_C111, Some(START), original.state()).unwrap();
    assert_eq!(copy.state(), original.state());
    for n in 0..40 {
        assert_eq!(copy.place(&user(n)), original.place(&user(n)), "user {n}");
    }
    assert_eq!(copy.unbought(), original.unbought());
    assert_eq!(copy.next_step_ms(), original.next_step_ms());
    // Both go on alike.
    let (a, b) = (
        admits(original.step(START + 600, 20)),
        admits(copy.step(START + 600, 20)),
    );
    assert_eq!(a.len(), b.len());
    let state = copy.state();
    let mut broken = state.clone();
    broken.head = 100;
    assert!(Room::from_state(config, 1, Some(START), broken).is_err());
    let mut broken = state.clone();
    broken.queue.push(999);
    assert!(Room::from_state(config, 1, Some(START), broken).is_err());
    let mut broken = state;
    broken.users.push((b"user:0", Status::Waiting, 0));
    assert!(Room::from_state(config, 1, Some(START), broken).is_err());
}

fn with_presence(presence_ms: u64) -> Room {
    let config = RoomConfig {
        rate: None,
        window_ms: 1_000,
        presence_ms: Some(presence_ms),
    };
    Room::new(config, 0x5EC_C111, Some(START), START - 10_000)
}

fn position(room: &Room, n: usize) -> Option<u64> {
    match room.place(&user(n))? {
        Place::Waiting(p) => Some(p),
        other => panic!("user {n}: {other:?}"),
    }
}

#[test]
fn a_leaver_in_the_middle_moves_everyone_behind_it_up_and_is_skipped_in_its_turn() {
    let mut room = room(None, DEFAULT_WINDOW_MS);
    for n in 0..10 {
        room.join(&user(n), START + n as u64).unwrap();
    }
    assert_eq!(room.step(START + 10, 100), Vec::new(), "no cohort");
    let moves = room.leave(&user(4), START + 11, 100).unwrap();
    assert!(matches!(moves[..], [Move::Leave(_, Place::Waiting(5))]));
    assert_eq!(room.place(&user(4)), None, "not in the room");
    assert_eq!(position(&room, 3), Some(4), "ahead: unmoved");
    assert_eq!(position(&room, 5), Some(5), "behind: one up");
    assert_eq!(position(&room, 9), Some(9));
    assert_eq!(room.waiting(), 9);
    assert_eq!(room.leave(&user(4), START + 12, 100), None, "left already");
    assert_eq!(room.leave(b"stranger", START + 12, 100), None);
    // Admission skips the empty place.
    let admitted = admits(room.admit(5, START + 13, 100));
    let names: Vec<&[u8]> = admitted.iter().map(|&at| room.user(at)).collect();
    assert_eq!(names, [user(0), user(1), user(2), user(3), user(5)]);
    assert_eq!(position(&room, 6), Some(1));
    // It joins again: at the back.
    assert_eq!(room.join(&user(4), START + 14), Ok(Place::Waiting(5)));
    // A room rebuilt from its state counts the same gaps.
    let copy = Room::from_state(room.config(), 0x5EC_C111, Some(START), room.state()).unwrap();
    for n in 0..10 {
        assert_eq!(copy.place(&user(n)), room.place(&user(n)), "user {n}");
    }
}

#[test]
fn an_admitted_leaver_passes_its_unit_to_the_next_at_once() {
    let mut room = room(None, DEFAULT_WINDOW_MS);
    for n in 0..2 {
        room.join(&user(n), START + 1).unwrap();
    }
    room.step(START + 1, 1);
    assert_eq!(admits(room.admit(5, START + 2, 1)).len(), 1, "one unit");
    let moves = room.leave(&user(0), START + 3, 1).unwrap();
    assert!(matches!(
        moves[..],
        [Move::Leave(_, Place::Admitted), Move::Admit(_)]
    ));
    assert!(room.may_buy(&user(1)) && !room.may_buy(&user(0)));
    assert_eq!(room.unbought(), 1);
    // Its old window is gone: joining again and admitted, it gets a whole new one.
    assert_eq!(room.join(&user(0), START + 4), Ok(Place::Waiting(1)));
    room.bought(&user(1));
    assert_eq!(admits(room.admit(1, START + 5, 1)).len(), 1);
    assert_eq!(room.next_step_ms(), Some(START + 5 + DEFAULT_WINDOW_MS));
    room.bought(&user(0));
    assert_eq!(
        room.leave(&user(0), START + 6, 0),
        None,
        "a buyer is not in the line"
    );
}

#[test]
fn a_cohort_leaver_is_left_out_of_the_draw_and_the_cohort_counts_who_waits() {
    let mut room = room(None, DEFAULT_WINDOW_MS);
    for n in 0..20 {
        room.join(&user(n), START - 100).unwrap();
    }
    let moves = room.leave(&user(7), START - 50, 100).unwrap();
    assert!(matches!(moves[..], [Move::Leave(_, Place::Cohort(20))]));
    assert_eq!(room.place(&user(8)), Some(Place::Cohort(19)));
    // 7 joins again before START: it is in the cohort again, once.
    assert_eq!(room.join(&user(7), START - 40), Ok(Place::Cohort(20)));
    room.leave(&user(3), START - 30, 100).unwrap();
    let moves = room.step(START, 100);
    assert_eq!(moves, [Move::Draw(19)]);
    let mut places: Vec<u64> = (0..20).filter_map(|n| position(&room, n)).collect();
    places.sort_unstable();
    assert_eq!(places, (1..=19).collect::<Vec<u64>>());
    assert_eq!(room.place(&user(3)), None);
}

#[test]
fn an_absent_user_is_dropped_in_its_turn_and_the_admission_goes_to_the_next() {
    let mut room = with_presence(500);
    for n in 0..6 {
        room.join(&user(n), START + 1).unwrap();
    }
    room.step(START + 1, 100);
    // 0 and 2 stop joining; the others keep their places. POSITION refreshes nothing.
    for n in [1, 3, 4, 5] {
        room.join(&user(n), START + 400).unwrap();
    }
    assert_eq!(position(&room, 0), Some(1));
    let moves = room.admit(2, START + 600, 100);
    let drops = moves.iter().filter(|m| matches!(m, Move::Drop(_))).count();
    let names: Vec<&[u8]> = admits(moves.clone())
        .iter()
        .map(|&at| room.user(at))
        .collect();
    assert_eq!((drops, names), (2, vec![&user(1)[..], &user(3)]));
    assert_eq!(room.place(&user(0)), None, "dropped");
    assert_eq!(position(&room, 4), Some(1));
    // Present within PRESENCE of its last JOIN, to the ms.
    assert_eq!(
        admits(room.admit(1, START + 900, 100)).len(),
        1,
        "4 joined at +400"
    );
    assert_eq!(
        admits(room.admit(1, START + 901, 100)).len(),
        0,
        "5 is 1 ms late"
    );
    assert_eq!(room.waiting(), 0);
    // A dropped user joins again at the back.
    assert_eq!(room.join(&user(0), START + 902), Ok(Place::Waiting(1)));
}

#[test]
fn presence_moves_with_each_user_in_the_draw() {
    let mut room = with_presence(1_000);
    for n in 0..50 {
        room.join(&user(n), START - 2_000).unwrap();
    }
    // Only the even users keep joining.
    for n in (0..50).step_by(2) {
        room.join(&user(n), START - 100).unwrap();
    }
    room.step(START, 100);
    let moves = room.admit(50, START + 500, 100);
    let admitted: Vec<usize> = admits(moves)
        .iter()
        .map(|&at| {
            std::str::from_utf8(room.user(at)).unwrap()[5..]
                .parse()
                .unwrap()
        })
        .collect();
    assert_eq!(admitted.len(), 25);
    assert!(admitted.iter().all(|n| n % 2 == 0), "{admitted:?}");
}

#[test]
fn every_change_time_makes_is_a_move_the_sale_replicates() {
    let mut room = room(None, 100);
    for n in 0..3 {
        room.join(&user(n), START - 1).unwrap();
    }
    assert_eq!(room.next_step_ms(), Some(START));
    assert_eq!(room.step(START, 10), [Move::Draw(3)]);
    assert_eq!(room.step(START, 10), [], "once");
    admits(room.admit(1, START + 1, 10));
    let lapsed = room.step(START + 101, 10);
    assert!(
        matches!(lapsed[..], [Move::Lapse(_), Move::Admit(_)]),
        "{lapsed:?}"
    );
}

#[test]
fn the_eta_follows_the_rate_and_counts_down_to_start() {
    let mut room = room(Some((100, 100)), DEFAULT_WINDOW_MS);
    for n in 0..1_000 {
        room.join(&user(n), START - 1).unwrap();
    }
    let cohort = room.place(&user(0)).unwrap();
    assert_eq!(room.eta_ms(cohort, START - 1_000), 1_000);
    room.step(START, u64::MAX);
    for n in 0..1_000 {
        let place = room.place(&user(n)).unwrap();
        let eta = room.eta_ms(place, START + 30);
        match place {
            Place::Admitted => assert_eq!(eta, 0),
            Place::Waiting(p) => assert_eq!(eta as u64, 70 + (p - 1) / 100 * 100, "at {p}"),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(room.eta_ms(Place::SoldOut, START), -1);
}

#[test]
fn a_waiting_user_with_presence_costs_at_most_48_bytes_at_a_million_joiners() {
    let mut room = with_presence(30_000);
    const JOINERS: usize = 1_000_000;
    for n in 0..JOINERS {
        room.join(format!("user:{n:08}").as_bytes(), START + 1)
            .unwrap();
    }
    // Half of them leave: the gaps are counted too.
    for n in (0..JOINERS).step_by(2) {
        room.leave(format!("user:{n:08}").as_bytes(), START + 2, 10);
    }
    let per_user = room.bytes() as f64 / JOINERS as f64;
    assert!(per_user <= 48.0, "{per_user:.1} bytes per joined user");
}
