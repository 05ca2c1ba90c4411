from inflight.cli import main

raise SystemExit(main())
