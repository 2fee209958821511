from benchmarks.prefix.main import main

main()
