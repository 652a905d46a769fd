from services.quantizer.main import main

main()
