from benchmarks.overhead.main import main

main()
